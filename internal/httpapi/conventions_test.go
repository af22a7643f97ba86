package httpapi_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// forEachDialect runs fn against a fresh server per dialect, the two in
// parallel (each server has its own database, data dir and port).
func forEachDialect(t *testing.T, fn func(t *testing.T, s *servertest.Server)) {
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		t.Parallel()
		fn(t, servertest.Start(t, d))
	})
}

func auditCount(t *testing.T, s *servertest.Server) int {
	t.Helper()
	evs, _, err := s.DB.Queries().ListAudit(context.Background(), store.AuditFilter{}, store.Page{Limit: store.MaxPageLimit})
	if err != nil {
		t.Fatal(err)
	}
	return len(evs)
}

func TestBadInputIsRefusedAndWritesNothing(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, s *servertest.Server) {
		admin := s.Admin()
		path := "/api/v1/orgs/" + s.Creds.OrgID + "/projects"
		before := auditCount(t, s)
		cases := []struct {
			name, method, path, body string
			status                   int
			code, mentions           string
		}{
			{"malformed json", "POST", path, `{"slug": "a",`, 400, "malformed_json", "JSON"},
			{"unknown field", "POST", path, `{"slug":"abc","name":"A","colour":"red"}`, 400, "unknown_field", "colour"},
			{"wrong type", "POST", path, `{"slug":"abc","name":42}`, 400, "invalid_field_type", "name"},
			{"missing required", "POST", path, `{"slug":"abc"}`, 400, "validation_failed", "/name"},
			{"not an object", "POST", path, `["abc"]`, 400, "invalid_json_type", "object"},
			{"empty body", "POST", path, ``, 400, "empty_body", "empty"},
			{"trailing data", "POST", path, `{"slug":"abc","name":"A"} {}`, 400, "malformed_json", "exactly one"},
			{"unknown route", "GET", "/api/v1/nothing-here", "", 404, "route_not_found", "/api/v1/nothing-here"},
			{"wrong method", "PATCH", "/api/v1/me", "", 405, "method_not_allowed", "GET"},
			{"bad limit", "GET", path + "?limit=0", "", 400, "invalid_limit", "limit"},
			{"bad cursor", "GET", path + "?cursor=%25%25", "", 400, "invalid_cursor", "cursor"},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				var body any
				if tc.body != "" || tc.method == "POST" {
					body = []byte(tc.body)
				}
				r := admin.Do(tc.method, tc.path, body)
				r.Want(t, tc.status)
				if r.ErrorCode() != tc.code {
					t.Fatalf("code %q, want %q: %s", r.ErrorCode(), tc.code, r.Body)
				}
				if !strings.Contains(string(r.Body), tc.mentions) {
					t.Fatalf("message does not mention %q: %s", tc.mentions, r.Body)
				}
			})
		}
		big := `{"slug":"abc","name":"` + strings.Repeat("x", 2<<20) + `"}`
		r := admin.Do("POST", path, []byte(big))
		r.Want(t, http.StatusRequestEntityTooLarge)
		if r.ErrorCode() != "body_too_large" {
			t.Fatalf("oversized body: %s", r.Body)
		}
		if n := auditCount(t, s); n != before {
			t.Fatalf("refused requests wrote %d audit rows", n-before)
		}
		list := admin.Do("GET", path, nil).Want(t, 200)
		if len(list.Items()) != 1 { // only the seeded dev project
			t.Fatalf("refused requests created projects: %s", list.Body)
		}
	})
}

func TestRequestIDIsEchoedAndCarried(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, store.SQLite)
	admin := s.Admin()
	r := admin.Do("POST", "/api/v1/orgs", map[string]string{"slug": "traced", "name": "T"}, "X-Request-ID", "trace-me-123")
	r.Want(t, 201)
	if r.Header.Get("X-Request-ID") != "trace-me-123" {
		t.Fatalf("X-Request-ID not echoed: %q", r.Header.Get("X-Request-ID"))
	}
	evs, _, _ := s.DB.Queries().ListAudit(context.Background(), store.AuditFilter{CorrelationID: "trace-me-123"}, store.Page{})
	if len(evs) != 1 || evs[0].Action != "org.create" {
		t.Fatalf("audit rows for the correlation id: %+v", evs)
	}
	if !strings.Contains(s.Logs.String(), `"correlation_id":"trace-me-123"`) {
		t.Fatal("correlation id missing from the logs")
	}
	// A hostile request id is replaced, not echoed.
	r = admin.Do("GET", "/api/v1/me", nil, "X-Request-ID", "<script>")
	if r.Header.Get("X-Request-ID") == "<script>" || r.Header.Get("X-Request-ID") == "" {
		t.Fatalf("unsafe request id echoed: %q", r.Header.Get("X-Request-ID"))
	}
}

func TestIdempotencyKeys(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, s *servertest.Server) {
		admin := s.Admin()
		path := "/api/v1/orgs/" + s.Creds.OrgID + "/projects"
		body := map[string]string{"slug": "idem", "name": "Idem"}
		first := admin.Do("POST", path, body, "X-Idempotency-Key", "key-1").Want(t, 201)
		second := admin.Do("POST", path, body, "X-Idempotency-Key", "key-1").Want(t, 201)
		if string(first.Body) != string(second.Body) {
			t.Fatalf("replay differs:\n%s\n%s", first.Body, second.Body)
		}
		if second.Header.Get("Idempotent-Replayed") != "true" || first.Header.Get("Idempotent-Replayed") != "" {
			t.Fatal("replay not marked")
		}
		// The Idempotency-Key spelling is honoured too.
		third := admin.Do("POST", path, body, "Idempotency-Key", "key-1").Want(t, 201)
		if third.String("id") != first.String("id") {
			t.Fatal("Idempotency-Key header not honoured")
		}
		list := admin.Do("GET", path, nil).Want(t, 200)
		n := 0
		for _, p := range list.Items() {
			if p["slug"] == "idem" {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("%d projects created, want 1", n)
		}
		diff := admin.Do("POST", path, map[string]string{"slug": "idem2", "name": "Other"}, "X-Idempotency-Key", "key-1").Want(t, 422)
		if diff.ErrorCode() != "idempotency_key_reused" {
			t.Fatalf("reused key: %s", diff.Body)
		}
		// Another principal's identical key is independent of this one.
		_, other := s.NewUser(admin, "other-idem@example.com")
		if r := other.Do("POST", path, body, "X-Idempotency-Key", "key-1"); r.Status == 201 || r.Header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("another principal got the replay: %d %s", r.Status, r.Body)
		}
		// A client error is remembered too: the retry sees the same 4xx.
		bad := map[string]string{"slug": "BAD", "name": "x"}
		e1 := admin.Do("POST", path, bad, "X-Idempotency-Key", "key-bad").Want(t, 400)
		e2 := admin.Do("POST", path, bad, "X-Idempotency-Key", "key-bad").Want(t, 400)
		if e2.Header.Get("Idempotent-Replayed") != "true" || e1.ErrorCode() != e2.ErrorCode() {
			t.Fatal("client error not replayed")
		}
	})
}

// A stored outcome is replayed only to a caller whose roles are unchanged:
// a member removed since the first request does not get its answer back,
// and a refusal stored before a role was given does not outlive the grant.
func TestIdempotentReplayFollowsTheCallersRoles(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, s *servertest.Server) {
		admin := s.Admin()
		path := "/api/v1/orgs/" + s.Creds.OrgID + "/projects"
		uid, user := s.NewUser(admin, "replay-roles@example.com")
		body := map[string]string{"slug": "replayed", "name": "Replayed"}

		// No role yet: refused, and the refusal is stored under the key.
		before := user.Do("POST", path, body, "X-Idempotency-Key", "k-refused")
		if before.Status < 400 || before.Status >= 500 {
			t.Fatalf("a user without a role created a project: %d %s", before.Status, before.Body)
		}
		if r := user.Do("POST", path, body, "X-Idempotency-Key", "k-refused"); r.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("unchanged roles: the refusal is not replayed: %d %s", r.Status, r.Body)
		}
		b := admin.Do("POST", "/api/v1/orgs/"+s.Creds.OrgID+"/members", map[string]string{"user_id": uid, "role": "org_admin"}).Want(t, 201)
		r := user.Do("POST", path, body, "X-Idempotency-Key", "k-refused").Want(t, 409)
		if r.ErrorCode() != "idempotency_key_grants_changed" || r.Header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("the refusal outlived the grant: %s", r.Body)
		}

		// With the role: created, and replayed while the role holds.
		created := user.Do("POST", path, body, "X-Idempotency-Key", "k-created").Want(t, 201)
		if r := user.Do("POST", path, body, "X-Idempotency-Key", "k-created").Want(t, 201); r.String("id") != created.String("id") {
			t.Fatalf("replay differs: %s", r.Body)
		}
		// Removed from the org: the stored 201 is not handed back, and
		// nothing is created a second time.
		admin.Do("DELETE", "/api/v1/orgs/"+s.Creds.OrgID+"/members/"+b.String("id"), nil).Want(t, 204)
		r = user.Do("POST", path, body, "X-Idempotency-Key", "k-created").Want(t, 409)
		if r.ErrorCode() != "idempotency_key_grants_changed" || strings.Contains(string(r.Body), created.String("id")) {
			t.Fatalf("a removed member got the stored answer: %s", r.Body)
		}
		n := 0
		for _, p := range admin.Do("GET", path, nil).Want(t, 200).Items() {
			if p["slug"] == "replayed" {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("%d projects named replayed, want 1", n)
		}
	})
}

func TestIdempotencyInFlightWithMatchingHash(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, store.SQLite)
	admin := s.Admin()
	path := "/api/v1/orgs/" + s.Creds.OrgID + "/projects"
	me := admin.Do("GET", "/api/v1/me", nil).Want(t, 200)
	// Claim the key with the exact hash the real request will have.
	body := []byte(`{"slug":"inflight","name":"I"}`)
	hash := s.RequestHash("POST", path, body)
	now := time.Now()
	if err := s.DB.Queries().ClaimIdempotencyKey(context.Background(), store.IdempotencyRecord{
		Principal: "user:" + me.String("id"), Key: "k", Method: "POST", Path: path, RequestHash: hash, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	r := admin.Do("POST", path, body, "X-Idempotency-Key", "k").Want(t, 409)
	if r.ErrorCode() != "idempotency_key_in_flight" {
		t.Fatalf("got %s", r.Body)
	}
}

func TestHealthReadyMetrics(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, store.SQLite)
	anon := s.Anonymous()
	anon.Do("GET", "/healthz", nil).Want(t, 200)
	ready := anon.Do("GET", "/readyz", nil).Want(t, 200)
	if ready.String("status") != "ready" {
		t.Fatalf("readyz: %s", ready.Body)
	}
	resp, err := http.Get(s.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(buf), `gpuaas_http_requests_total{code="200",method="GET",route="GET /readyz"}`) {
		t.Fatalf("metrics lack the request counter:\n%.2000s", buf)
	}
	jwks := anon.Do("GET", "/.well-known/jwks.json", nil).Want(t, 200)
	if !strings.Contains(string(jwks.Body), `"kid"`) {
		t.Fatal("jwks has no key")
	}
}

// The hash a keyed request is remembered by is keyed too: a new account's
// body holds its password, and a plain SHA-256 of it in the database could
// be tried against offline. A retry still matches, and a changed body
// still does not.
func TestIdempotencyKeepsNoPlainHashOfABody(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, store.SQLite)
	admin := s.Admin()
	me := admin.Do("GET", "/api/v1/me", nil).Want(t, 200)
	body := []byte(`{"email":"erin@example.com","password":"correct-horse-battery-staple"}`)
	admin.Do("POST", "/api/v1/users", body, "X-Idempotency-Key", "new-erin").Want(t, http.StatusCreated)
	rec, err := s.DB.Queries().GetIdempotencyRecord(context.Background(), "user:"+me.String("id"), "new-erin")
	if err != nil {
		t.Fatal(err)
	}
	plain := sha256.New()
	plain.Write([]byte("POST /api/v1/users\n"))
	plain.Write(body)
	if rec.RequestHash == hex.EncodeToString(plain.Sum(nil)) || strings.Contains(rec.RequestHash, "correct-horse") {
		t.Fatalf("the database keeps a plain hash of the body with its password: %s", rec.RequestHash)
	}
	if rec.RequestHash != s.RequestHash("POST", "/api/v1/users", body) {
		t.Errorf("the stored hash is not the server's keyed hash of the request")
	}
	admin.Do("POST", "/api/v1/users", body, "X-Idempotency-Key", "new-erin").Want(t, http.StatusCreated)
	other := []byte(`{"email":"erin@example.com","password":"another-long-password"}`)
	if r := admin.Do("POST", "/api/v1/users", other, "X-Idempotency-Key", "new-erin").Want(t, 422); r.ErrorCode() != "idempotency_key_reused" {
		t.Errorf("the key with another password: %s", r.Body)
	}
}
