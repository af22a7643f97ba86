package cloudevents

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/errdefs"
)

func TestDecode(t *testing.T) {
	now := time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
	var problems []string
	bad := func(field, code, msg string, args ...any) { problems = append(problems, field+":"+code) }
	ev := Decode([]byte(`{"specversion":"1.0","id":"e1","source":"//a","type":"t","subject":"i","time":"2026-11-27T07:00:00Z",
		"projectid":"p","correlationid":"c","data":{"k":1}}`), now, true, bad)
	if len(problems) > 0 || ev.ID != "e1" || ev.Source != "//a" || ev.Subject != "i" || ev.ProjectID != "p" || ev.CorrelationID != "c" ||
		!ev.Time.Equal(now.Add(-time.Hour)) || string(ev.Data) != `{"k":1}` {
		t.Fatalf("%+v %v", ev, problems)
	}
	for body, want := range map[string]string{
		`{"specversion":"0.3","id":"e","source":"s","type":"t"}`:                            "specversion:unsupported",
		`{"specversion":"1.0","id":"","source":"s","type":"t"}`:                             "id:required",
		`{"specversion":"1.0","id":"e\n","source":"s","type":"t"}`:                          "id:invalid",
		`{"specversion":"1.0","id":"e","source":"","type":"t"}`:                             "source:required",
		`{"specversion":"1.0","id":"e","source":"s"}`:                                       "type:required",
		`{"specversion":"1.0","id":"e","source":"s","type":"t","time":"now"}`:               "time:invalid_time",
		`{"specversion":"1.0","id":"e","source":"s","type":"t","datacontenttype":"text/x"}`: "datacontenttype:unsupported",
		`{"specversion":"1.0","id":"e","source":"s","type":"t","data":[1]}`:                 "data:required",
		`["not an object"]`: ":malformed_event",
		`{"specversion":"1.0","id":"e","source":"s","type":"t","correlationid":"a\nb"}`: "correlationid:invalid",
	} {
		problems = nil
		Decode([]byte(body), now, false, bad)
		if len(problems) == 0 || problems[0] != want {
			t.Errorf("%s: %v, want %s", body, problems, want)
		}
	}
	problems = nil
	if ev := Decode([]byte(`{"specversion":"1.0","id":"e","source":"s","type":"t","data":null}`), now, false, bad); len(problems) > 0 || ev.Data != nil {
		t.Errorf("optional null data: %+v %v", ev, problems)
	}
	problems = nil
	if Decode([]byte(`{"specversion":"1.0","id":"e","source":"s","type":"t"}`), now, true, bad); len(problems) != 1 || problems[0] != "data:required" {
		t.Errorf("required data missing: %v", problems)
	}
}

func TestSplitAndProblems(t *testing.T) {
	for _, c := range []struct {
		body  string
		batch bool
		code  string
	}{{"", false, "empty_body"}, {"[]", true, "empty_batch"}, {"{}", true, "malformed_batch"}, {"[{}]", false, "malformed_event"}, {"[{", true, "malformed_json"}} {
		_, err := Split([]byte(c.body), c.batch)
		if e, ok := errdefs.As(err); !ok || e.Code != c.code {
			t.Errorf("%q batch=%v: %v, want %s", c.body, c.batch, err, c.code)
		}
	}
	p := NewProblems(true)
	p.At(3)("data/x", "invalid", "is %s", "wrong")
	err := p.Err("invalid_thing")
	e, ok := errdefs.As(err)
	if !ok || e.Code != "invalid_thing" || !strings.Contains(e.Message, "/3/data/x") {
		t.Fatalf("%v", err)
	}
	if NewProblems(false).Err("x") != nil {
		t.Fatal("no problems, yet an error")
	}
	if Key("a", "p", "s", "1") == Key("b", "p", "s", "1") || Key("a", "p", "s", "1") == Key("a", "q", "s", "1") {
		t.Fatal("keys of different namespaces or projects collide")
	}
}

// FuzzDecode: whatever a workload sends, decoding reports problems or gives
// an envelope whose identifying fields are printable and bounded.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"specversion":"1.0","id":"e1","source":"s","type":"t","data":{}}`), true)
	f.Add([]byte(`{"specversion":"1.0","id":"e\u0000","source":"s","type":"t","time":"2026-01-01T00:00:00Z"}`), false)
	f.Add([]byte(`{"data":7}`), false)
	now := time.Now()
	f.Fuzz(func(t *testing.T, raw []byte, required bool) {
		n := 0
		ev := Decode(raw, now, required, func(string, string, string, ...any) { n++ })
		if n > 0 {
			return
		}
		if ev.ID == "" || len(ev.ID) > MaxIDLen || !Printable(ev.ID) || ev.Source == "" || len(ev.Source) > MaxSourceLen ||
			!Printable(ev.Source) || ev.Type == "" || (required && len(ev.Data) == 0) || len(ev.CorrelationID) > MaxIDLen || !Printable(ev.Subject) {
			t.Fatalf("accepted %q as %+v", raw, ev)
		}
	})
}

// Rekey gives a key within the instance to exactly the rows another
// instance's row kept out: not to rows stored, nor to rows its own
// instance's row kept out (duplicates).
func TestRekey(t *testing.T) {
	rows := []Keyed{
		{RowID: "r1", Key: "k1", Source: "//s", EventID: "1"}, // stored
		{RowID: "r2", Key: "k2", Source: "//s", EventID: "2"}, // kept out by its own instance's row
		{RowID: "r3", Key: "k3", Source: "//s", EventID: "3"}, // kept out by another instance's row
		{RowID: "r4", Key: "k4", Source: "//t", EventID: "4"}, // kept out by a row of no instance
	}
	var asked []string
	owners := func(_ context.Context, keys []string) (map[string]string, error) {
		asked = keys
		return map[string]string{"k1": "other", "k2": "me", "k3": "other", "k4": ""}, nil
	}
	got, err := Rekey(context.Background(), "ns", "me", rows, map[string]bool{"r1": true}, owners)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"r3": Key("ns", "me", "//s", "3"), "r4": Key("ns", "me", "//t", "4")}; !maps.Equal(got, want) {
		t.Fatalf("rekeyed %v, want %v", got, want)
	}
	if !slices.Equal(asked, []string{"k2", "k3", "k4"}) {
		t.Fatalf("asked the owners of %v, want those of the rows not stored", asked)
	}
	none, err := Rekey(context.Background(), "ns", "me", rows[:1], map[string]bool{"r1": true},
		func(context.Context, []string) (map[string]string, error) {
			t.Fatal("asked owners with every row stored")
			return nil, nil
		})
	if err != nil || len(none) != 0 {
		t.Fatalf("every row stored: %v %v", none, err)
	}
}
