package console

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/client"
	"github.com/gpuaas/gpuaas/internal/iam"
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

// Every answer of the console says nosniff, a CSV export included: a
// browser that sniffed one (its cells are the project's data) could take
// it for HTML or script.
func TestEveryAnswerSaysNoSniff(t *testing.T) {
	now := time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)
	api := fakeAPI(map[string]http.HandlerFunc{
		"GET /api/v1/me":               reply(`{"id":"u1","type":"user","email":"a@example.com"}`),
		"GET /api/v1/orgs":             reply(`{"items":[{"id":"o1","slug":"acme"}]}`),
		"GET /api/v1/orgs/o1/projects": reply(`{"items":[{"id":"p1","org_id":"o1","slug":"web"}]}`),
		"GET /api/v1/billing/usage": func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/csv")
			_, _ = io.WriteString(w, "id,quantity\n1,2\n")
		},
	})
	sessions := oneSession(ConsoleSession{UserID: "u1", CSRFToken: "csrf", ProjectID: "p1", CreatedAt: now, LastSeenAt: now, ExpiresAt: now.Add(time.Hour)})
	c, err := New(Config{API: api, Sessions: sessions, PublicURL: func() string { return "http://x" }, Now: func() time.Time { return now },
		Mint:   func(context.Context, string) (string, time.Time, error) { return "tok", now.Add(time.Hour), nil },
		Grants: func(context.Context, string) (*iam.Grants, error) { return &iam.Grants{}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path, contentType string
		status            int
	}{
		{"/usage.csv?what=usage", "text/csv; charset=utf-8", http.StatusOK},
		{"/no-such-page", "text/html; charset=utf-8", http.StatusNotFound},
		{"/static/console.css", "text/css; charset=utf-8", http.StatusOK},
	} {
		req := httptest.NewRequest("GET", tc.path, nil)
		req.AddCookie(&http.Cookie{Name: SessionCookie, Value: "cookie"})
		rec := httptest.NewRecorder()
		c.ServeHTTP(rec, req)
		if rec.Code != tc.status || rec.Header().Get("Content-Type") != tc.contentType {
			t.Fatalf("%s: %d %v\n%s", tc.path, rec.Code, rec.Header(), rec.Body)
		}
		if got := rec.Header().Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("%s: X-Content-Type-Options %q, want nosniff", tc.path, got)
		}
	}
}
