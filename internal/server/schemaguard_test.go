package server_test

import (
	"context"
	"database/sql"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/gpuaas/gpuaas/internal/config"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
)

// A replica whose database schema moves away from its binary's (here:
// ahead, as when `gpuaas migrate` of a newer release ran while it was left
// running) stops its background jobs — the relay publishes nothing and
// gives its lease up — and answers changes with 503 schema_mismatch naming
// both versions, while reads go on; once the schema is its own again it
// resumes: the event committed meanwhile is published, and changes are
// served.
func TestSchemaGuardPausesAReplicaOnAnotherSchema(t *testing.T) {
	// The test runs every check itself (Kick); ten minutes keep the
	// periodic ones out of its way.
	s := servertest.Start(t, store.Postgres, func(c *config.Config) { c.SchemaCheckInterval = 10 * time.Minute })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	raw, err := sql.Open("pgx", s.App.Config.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	admin := s.Admin()
	check, paused := s.App.SchemaGuard()
	relay, q := s.App.Relay(), s.DB.Queries()

	// kickUntil kicks a job, a run at a time, until cond holds.
	kickUntil := func(job interface {
		Kick()
		Runs() uint64
		WaitRuns(context.Context, uint64) error
	}, what string, cond func() bool) {
		t.Helper()
		for !cond() {
			n := job.Runs()
			job.Kick()
			if err := job.WaitRuns(ctx, n+1); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		}
	}
	drained := func() bool {
		un, err := q.UnpublishedEvents(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		more, err := q.HasUnsequencedEvents(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return len(un) == 0 && !more
	}
	price := func(micros int) *servertest.Response {
		return admin.Do("POST", "/api/v1/admin/billing/prices",
			map[string]any{"usage_source": "allocation", "sku": "h100-80gb.1x", "unit_price_micros": micros})
	}
	price(1).Want(t, 201)
	kickUntil(relay, "the relay publishes while the schema is the binary's", drained)

	// The newer release's migrate records its migration.
	latest := store.LatestVersion(store.Postgres)
	if _, err := raw.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, 'from_a_newer_release', $2)`,
		latest+1, time.Now().UTC().Format(time.RFC3339)); err != nil {
		t.Fatal(err)
	}
	kickUntil(check, "the guard pauses", paused)
	if relay.Leader() {
		t.Error("the paused relay still holds the outbox lease")
	}
	r := price(2).Want(t, 503)
	if r.ErrorCode() != "schema_mismatch" {
		t.Errorf("a change while the schema is ahead: code %q, want schema_mismatch", r.ErrorCode())
	}
	msg, _ := r.JSON["error"].(map[string]any)["message"].(string)
	for _, want := range []string{strconv.Itoa(latest), strconv.Itoa(latest + 1), "newer release"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the 503's message %q does not name %q", msg, want)
		}
	}
	admin.Do("GET", "/api/v1/admin/billing/prices", nil).Want(t, 200) // reads go on
	// Reads are authenticated, so the signing keys are still read again
	// (a key retired now must stop verifying here too).
	reload := s.App.SigningKeyReload()
	wait, stop := context.WithTimeout(ctx, 10*time.Second)
	n := reload.Runs()
	reload.Kick()
	if err := reload.WaitRuns(wait, n+1); err != nil {
		t.Errorf("the signing keys were not read again while paused: %v", err)
	}
	stop()
	// The registry: a push is refused in its own error format, which
	// docker prints; its token endpoint stays open (containerd asks for a
	// pull token with a POST first).
	post := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Post(s.URL+path, "application/x-www-form-urlencoded", strings.NewReader("grant_type=password&service=x&username=u&password=p"))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := post("/v2/p/demo/runtime/blobs/uploads/"); code != 503 || !strings.Contains(body, `"code":"UNAVAILABLE"`) || !strings.Contains(body, "newer release") {
		t.Errorf("a registry push while paused: %d %s, want 503 with the registry's UNAVAILABLE error and the guard's message", code, body)
	}
	if code, body := post("/v2/token"); code == 503 {
		t.Errorf("the registry's token endpoint refused while paused: %d %s", code, body)
	}

	// An event another replica commits now stays in the outbox: this
	// replica's relay was stopped in the check that paused it, so a kick
	// runs nothing.
	if err := s.DB.Mutate(ctx, func(tx *store.Tx) error {
		if err := tx.Emit(store.Event{Type: "apps.entitlement.updated", Subject: "guard", OrgID: s.Creds.OrgID, ProjectID: s.Creds.ProjectID},
			[]byte(`{"entitlement_id":"0190a0c0-0000-7000-8000-000000000000","app_slug":"guard","enabled":true,"policy_overrides":{}}`)); err != nil {
			return err
		}
		return tx.Audit(store.AuditEvent{Action: "guard.emit", ResourceType: "guard"}, nil, nil)
	}); err != nil {
		t.Fatal(err)
	}
	passes := relay.Runs()
	relay.Kick()
	if relay.Runs() != passes || drained() {
		t.Fatalf("the relay ran %d passes while paused (outbox drained: %v)", relay.Runs()-passes, drained())
	}
	if !strings.Contains(s.LogText(), "background jobs paused") {
		t.Error("the pause was not logged")
	}

	// The schema is the binary's again.
	if _, err := raw.ExecContext(ctx, `DELETE FROM schema_migrations WHERE version = $1`, latest+1); err != nil {
		t.Fatal(err)
	}
	kickUntil(check, "the guard resumes", func() bool { return !paused() })
	kickUntil(relay, "the relay publishes what was committed while paused", drained)
	price(3).Want(t, 201)
	if got := strings.Count(s.LogText(), "background jobs paused"); got != 1 {
		t.Errorf("the pause was logged %d times, want once", got)
	}
	if !strings.Contains(s.LogText(), "background jobs resumed") {
		t.Error("the resumption was not logged")
	}
}
