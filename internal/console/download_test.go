package console

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gpuaas/gpuaas/client"
)

// A download the API refuses before its first byte is answered as the
// refusal, not as an empty file with 200; one that fails part way is cut
// short, so the browser does not keep half a file as whole.
func TestADownloadTheAPIRefusesIsNoEmptyFile(t *testing.T) {
	c, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	get := func(export func(io.Writer) error) (rec *httptest.ResponseRecorder, aborted bool) {
		rec = httptest.NewRecorder()
		defer func() {
			if p := recover(); p != nil {
				if p != http.ErrAbortHandler {
					panic(p)
				}
				aborted = true
			}
		}()
		c.download(rec, httptest.NewRequest("GET", "/usage.csv", nil), "p-usage.csv", "text/csv; charset=utf-8", export)
		return rec, false
	}

	cases := []struct {
		name   string
		err    error
		status int
		text   string
	}{
		{"forbidden looks missing", &client.APIError{Status: 403, Code: "forbidden", Message: "no"}, 404, "Not found"},
		{"a refusal", &client.APIError{Status: 422, Code: "invalid_query", Message: "the range is too long"}, 422, "the range is too long"},
		{"the API failed", errors.New("connection reset"), 500, "could not load this page"},
	}
	for _, tc := range cases {
		rec, aborted := get(func(io.Writer) error { return tc.err })
		if aborted || rec.Code != tc.status || rec.Header().Get("Content-Disposition") != "" ||
			!strings.HasPrefix(rec.Header().Get("Content-Type"), "text/html") || !strings.Contains(rec.Body.String(), tc.text) {
			t.Errorf("%s: %d %v aborted=%v, want %d and a page saying %q", tc.name, rec.Code, rec.Header(), aborted, tc.status, tc.text)
		}
	}

	rec, aborted := get(func(w io.Writer) error { _, err := io.WriteString(w, "id,quantity\n1,2\n"); return err })
	if aborted || rec.Code != 200 || rec.Header().Get("Content-Disposition") != `attachment; filename="p-usage.csv"` ||
		rec.Header().Get("Content-Type") != "text/csv; charset=utf-8" || rec.Body.String() != "id,quantity\n1,2\n" {
		t.Errorf("a download: %d %v %q", rec.Code, rec.Header(), rec.Body.String())
	}
	if rec, aborted := get(func(io.Writer) error { return nil }); aborted || rec.Code != 200 || rec.Header().Get("Content-Type") != "text/csv; charset=utf-8" {
		t.Errorf("an empty download: %d %v", rec.Code, rec.Header())
	}
	if _, aborted := get(func(w io.Writer) error { io.WriteString(w, "id\n"); return errors.New("reset") }); !aborted {
		t.Error("a download that failed part way ended as if whole")
	}
}
