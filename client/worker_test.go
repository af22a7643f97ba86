package client

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// An acquire answers an operation (200), nothing with a Retry-After (204),
// or an error envelope; c.Do cannot tell 204 from an empty 200, so
// AcquireWorkerOperation reads the answer itself.
func TestAcquireWorkerOperation(t *testing.T) {
	var status int
	var header, body string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in, _ := io.ReadAll(r.Body)
		if r.Method != http.MethodPost || r.URL.EscapedPath() != "/api/v1/apps/my%20app/worker/acquire" ||
			r.Header.Get("Authorization") != "Bearer tok" || r.Header.Get("X-Idempotency-Key") == "" || string(in) != `{"wait_seconds":3}` {
			t.Errorf("request: %s %s %v %s", r.Method, r.URL.EscapedPath(), r.Header, in)
		}
		if header != "" {
			w.Header().Set("Retry-After", header)
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	defer srv.Close()
	c := New(srv.URL, "tok")

	status, header, body = http.StatusOK, "", `{"operation_id":"op1","lease_id":"l1","kind":"create","attempt":2,"state":{"n":1}}`
	op, ok, _, err := c.AcquireWorkerOperation(t.Context(), "my app", 3)
	if err != nil || !ok || op.OperationID != "op1" || op.LeaseID != "l1" || op.Attempt != 2 || string(op.State) != `{"n":1}` {
		t.Fatalf("200: %+v %v %v", op, ok, err)
	}

	status, header, body = http.StatusNoContent, "7", ""
	if _, ok, after, err := c.AcquireWorkerOperation(t.Context(), "my app", 3); err != nil || ok || after != 7*time.Second {
		t.Fatalf("204: %v %v %v", ok, after, err)
	}

	status, header, body = http.StatusNotFound, "", `{"error":{"code":"not_app_worker","message":"no","correlation_id":"c"}}`
	_, ok, _, err = c.AcquireWorkerOperation(t.Context(), "my app", 3)
	if api, isAPI := errors.AsType[*APIError](err); ok || !isAPI || api.Status != 404 || api.Code != "not_app_worker" {
		t.Fatalf("404: %v %v", ok, err)
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for in, want := range map[string]time.Duration{
		"": 0, "5": 5 * time.Second, "0": 0, "-3": 0, "-9223372036854775807": 0, "soon": 0,
		now.Add(9 * time.Second).Format(http.TimeFormat): 9 * time.Second,
		now.Add(-time.Minute).Format(http.TimeFormat):    0,
	} {
		if got := parseRetryAfter(in, now); got != want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", in, got, want)
		}
	}
}
