package httpapi

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// A CSV export whose rows fail part way (the database went away on a later
// page) must not end as a complete-looking 200: the download fails.
func TestCSVExportFailingMidwayIsNotAShortFile(t *testing.T) {
	a := &API{Logger: slog.New(slog.DiscardHandler), metrics: newMetrics()}
	rt := route{method: "GET", path: "/export", public: true, pattern: "GET /export"}
	rt.handler = func(w http.ResponseWriter, r *http.Request) error {
		return a.writeCSV(w, r, []string{"id", "amount"}, func(emit func([]string) error) error {
			for i := range 2000 { // past the buffers: the status and a first part are sent
				if err := emit([]string{"entry-" + strconv.Itoa(i), "1"}); err != nil {
					return err
				}
			}
			return errors.New("the database is gone")
		})
	}
	srv := httptest.NewServer(a.wrap(rt))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/export")
	if err != nil {
		return // cut before the header was sent: a failed download
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil {
		t.Fatalf("a failed export read as a complete %d response:\n%s", resp.StatusCode, body)
	}
}

type idemQueries struct {
	Queries
	released, completed int
	headers             map[string]string // of the last completion
}

func (q *idemQueries) ClaimIdempotencyKey(context.Context, storage.IdempotencyRecord) error {
	return nil
}
func (q *idemQueries) ReleaseIdempotencyKey(context.Context, storage.IdempotencyClaim) error {
	q.released++
	return nil
}
func (q *idemQueries) CompleteIdempotencyKey(_ context.Context, _ storage.IdempotencyClaim, _ int, _ []byte, _ string, headers map[string]string) error {
	q.completed++
	q.headers = headers
	return nil
}

type idemStore struct {
	Store
	q *idemQueries
}

func (s idemStore) Read() Queries { return s.q }

// A keyed request whose handler panics is a server error: its claim is
// given back so the retry runs, not held as "in flight" until abandoned.
func TestKeyedRequestThatPanicsReleasesItsClaim(t *testing.T) {
	q := &idemQueries{}
	a := &API{Store: idemStore{q: q}, Logger: slog.New(slog.DiscardHandler), IdempotencyTTL: time.Hour,
		IdempotencyHashKey: []byte("k"), Now: time.Now}
	rt := route{method: "POST", path: "/x", pattern: "POST /x",
		handler: func(http.ResponseWriter, *http.Request) error { panic("odd input") }}
	r := httptest.NewRequest("POST", "/x", strings.NewReader(`{}`))
	r = r.WithContext(principal.With(r.Context(), principal.Principal{Type: principal.User, ID: "u1"}))
	func() {
		defer func() { _ = recover() }() // wrap's recovery
		a.idempotent(&recorder{ResponseWriter: httptest.NewRecorder()}, r, rt, "key-1")
	}()
	if q.released != 1 || q.completed != 0 {
		t.Fatalf("after a panic: %d releases, %d completions; want the claim released", q.released, q.completed)
	}
}

// A keyed answer is stored with the headers a replay repeats (Location,
// ETag) and none other: a cookie or a header true only at the time must
// not be kept, let alone handed out again.
func TestKeyedAnswerKeepsOnlyTheReplayedHeaders(t *testing.T) {
	q := &idemQueries{}
	a := &API{Store: idemStore{q: q}, Logger: slog.New(slog.DiscardHandler), IdempotencyTTL: time.Hour,
		IdempotencyHashKey: []byte("k"), Now: time.Now}
	rt := route{method: "POST", path: "/x", pattern: "POST /x",
		handler: func(w http.ResponseWriter, _ *http.Request) error {
			h := w.Header()
			h.Set("Location", "/api/v1/projects/p/operations/op-1")
			h.Set("ETag", `"v1"`)
			h.Set("Set-Cookie", "session=secret; HttpOnly")
			h.Set("Retry-After", "5")
			writeJSON(w, http.StatusAccepted, map[string]string{"id": "i-1"})
			return nil
		}}
	r := httptest.NewRequest("POST", "/x", strings.NewReader(`{}`))
	r = r.WithContext(principal.With(r.Context(), principal.Principal{Type: principal.User, ID: "u1"}))
	a.idempotent(&recorder{ResponseWriter: httptest.NewRecorder()}, r, rt, "key-1")
	want := map[string]string{"Location": "/api/v1/projects/p/operations/op-1", "ETag": `"v1"`}
	if q.completed != 1 || !maps.Equal(q.headers, want) {
		t.Fatalf("%d completions, stored headers %v; want one, with %v", q.completed, q.headers, want)
	}
}

// Text a tenant or an app chose reaches the CSV exports (event ids and
// sources, correction reasons); a spreadsheet must not run it as a
// formula, while numbers, negative ones included, stay numbers.
func TestCSVCellsAreNotFormulas(t *testing.T) {
	for in, want := range map[string]string{
		"=HYPERLINK(\"http://x\",\"y\")": "'=HYPERLINK(\"http://x\",\"y\")",
		"+1+1":                           "'+1+1",
		"-2+3":                           "'-2+3",
		"@SUM(A1)":                       "'@SUM(A1)",
		"\tcmd":                          "'\tcmd",
		"-1500000":                       "-1500000",
		"+12":                            "+12",
		"-0.5":                           "-0.5",
		"refund":                         "refund",
		"2026-11-28T09:00:00Z":           "2026-11-28T09:00:00Z",
		"":                               "",
	} {
		if got := csvCell(in); got != want {
			t.Errorf("csvCell(%q) = %q, want %q", in, got, want)
		}
	}
}
