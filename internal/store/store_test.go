package store_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/gpuaas/gpuaas/internal/correlation"
	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// The conformance suite: every test here runs against SQLite and PostgreSQL.

func newID() string { return uuid.Must(uuid.NewV7()).String() }

func mkOrg(t *testing.T, db *store.DB, slug string) iam.Org {
	t.Helper()
	o := iam.Org{ID: newID(), Slug: slug, Name: slug, CreatedAt: time.Now()}
	if err := db.Queries().CreateOrg(context.Background(), o); err != nil {
		t.Fatalf("create org: %v", err)
	}
	return o
}

func TestConformance(t *testing.T) {
	storetest.ForEachDialect(t, func(t *testing.T, db *store.DB) {
		t.Run("sentinels", func(t *testing.T) { testSentinels(t, db) })
		t.Run("pagination", func(t *testing.T) { testPagination(t, db) })
		t.Run("mutate_audit", func(t *testing.T) { testMutateAudit(t, db) })
		t.Run("idempotency", func(t *testing.T) { testIdempotency(t, db) })
		t.Run("idempotency_commit", func(t *testing.T) { testIdempotencyCommit(t, db) })
		t.Run("audit_filters", func(t *testing.T) { testAuditFilters(t, db) })
		t.Run("concurrent_writers", func(t *testing.T) { testConcurrentWriters(t, db) })
		t.Run("schema_version", func(t *testing.T) { testSchemaVersion(t, db) })
	})
}

func testSentinels(t *testing.T, db *store.DB) {
	ctx := context.Background()
	q := db.Queries()
	o := mkOrg(t, db, "acme")
	if err := q.CreateOrg(ctx, iam.Org{ID: newID(), Slug: "acme", Name: "x", CreatedAt: time.Now()}); !errors.Is(err, store.ErrAlreadyExists) {
		t.Fatalf("duplicate slug: got %v, want ErrAlreadyExists", err)
	}
	if _, err := q.GetOrg(ctx, newID()); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("missing org: got %v, want ErrNotFound", err)
	}
	got, err := q.GetOrg(ctx, o.ID)
	if err != nil || got.Slug != "acme" || got.CreatedAt.IsZero() {
		t.Fatalf("get org: %+v %v", got, err)
	}
	if d := got.CreatedAt.Sub(o.CreatedAt); d > time.Millisecond || d < -time.Millisecond {
		t.Fatalf("created_at round trip drifted by %v", d)
	}
	p := iam.Project{ID: newID(), OrgID: o.ID, Slug: "web", Name: "Web", CreatedAt: time.Now()}
	if err := q.CreateProject(ctx, p); err != nil {
		t.Fatal(err)
	}
	p2 := p
	p2.ID = newID()
	if err := q.CreateProject(ctx, p2); !errors.Is(err, store.ErrAlreadyExists) {
		t.Fatalf("duplicate project slug in org: got %v", err)
	}
	// Same slug in another org is fine.
	o2 := mkOrg(t, db, "other")
	p2.OrgID = o2.ID
	if err := q.CreateProject(ctx, p2); err != nil {
		t.Fatalf("same slug other org: %v", err)
	}
	// A project in a missing org violates the foreign key.
	p3 := iam.Project{ID: newID(), OrgID: newID(), Slug: "x", Name: "x", CreatedAt: time.Now()}
	if err := q.CreateProject(ctx, p3); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("dangling org: got %v, want ErrConflict", err)
	}
	if err := q.SetUserStatus(ctx, newID(), "disabled", time.Now()); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("update missing user: got %v", err)
	}
}

func testPagination(t *testing.T, db *store.DB) {
	ctx := context.Background()
	o := mkOrg(t, db, "pager")
	for i := 0; i < 7; i++ {
		if err := db.Queries().CreateProject(ctx, iam.Project{ID: newID(), OrgID: o.ID, Slug: fmt.Sprintf("p%d", i), Name: "p", CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	var all []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("pagination does not terminate")
		}
		ps, next, err := db.Queries().ListProjects(ctx, o.ID, nil, store.Page{Limit: 3, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps {
			all = append(all, p.Slug)
		}
		if next == "" {
			break
		}
		cursor = next
	}
	if len(all) != 7 || all[0] != "p0" || all[6] != "p6" {
		t.Fatalf("paged listing = %v", all)
	}
	if _, _, err := db.Queries().ListProjects(ctx, o.ID, nil, store.Page{Cursor: "!!not-base64"}); err == nil {
		t.Fatal("a garbage cursor must be refused")
	}
}

func testMutateAudit(t *testing.T, db *store.DB) {
	ctx := principal.With(correlation.With(context.Background(), "corr-"+newID()), principal.Principal{Type: principal.User, ID: "u1"})
	var orgID string
	err := db.Mutate(ctx, func(tx *store.Tx) error {
		o := iam.Org{ID: newID(), Slug: "audited", Name: "A", CreatedAt: time.Now()}
		orgID = o.ID
		if err := tx.CreateOrg(ctx, o); err != nil {
			return err
		}
		if err := tx.Emit(store.Event{Type: "org.created", Subject: "orgs/" + o.ID, OrgID: o.ID}, map[string]string{"slug": o.Slug}); err != nil {
			return err
		}
		return tx.Audit(store.AuditEvent{Action: "org.create", ResourceType: "org", ResourceID: o.ID, OrgID: o.ID}, nil, map[string]string{"slug": o.Slug})
	})
	if err != nil {
		t.Fatal(err)
	}
	outbox, err := store.OutboxByCorrelationForTest(ctx, db.Queries(), correlation.ID(ctx))
	if err != nil || len(outbox) != 1 {
		t.Fatalf("outbox rows = %d, err %v", len(outbox), err)
	}
	if e := outbox[0]; e.Type != "org.created" || e.Actor != "user:u1" || e.OrgID != orgID || e.ID == "" || !strings.Contains(string(e.Data), `"audited"`) {
		t.Fatalf("outbox row = %+v data %s", e, e.Data)
	}
	evs, _, err := db.Queries().ListAudit(ctx, store.AuditFilter{CorrelationID: correlation.ID(ctx)}, store.Page{})
	if err != nil || len(evs) != 1 {
		t.Fatalf("audit rows = %d, err %v", len(evs), err)
	}
	if e := evs[0]; e.ActorID != "u1" || e.ActorType != "user" || e.ResourceID != orgID || e.Outcome != "success" || string(e.After) == "" {
		t.Fatalf("audit row = %+v", e)
	}

	// A mutation that fails after writing rolls back its change and its audit row.
	ctx2 := correlation.With(ctx, "corr-"+newID())
	boom := errors.New("boom")
	err = db.Mutate(ctx2, func(tx *store.Tx) error {
		if err := tx.CreateOrg(ctx2, iam.Org{ID: newID(), Slug: "rolled-back", Name: "R", CreatedAt: time.Now()}); err != nil {
			return err
		}
		if err := tx.Audit(store.AuditEvent{Action: "org.create", ResourceType: "org"}, nil, nil); err != nil {
			return err
		}
		if err := tx.Emit(store.Event{Type: "org.created"}, nil); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("got %v", err)
	}
	if _, err := db.Queries().GetOrgBySlug(ctx, "rolled-back"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("rolled-back org exists: %v", err)
	}
	if evs, _, _ := db.Queries().ListAudit(ctx, store.AuditFilter{CorrelationID: correlation.ID(ctx2)}, store.Page{}); len(evs) != 0 {
		t.Fatalf("rolled-back mutation left %d audit rows", len(evs))
	}
	if outbox, _ := store.OutboxByCorrelationForTest(ctx, db.Queries(), correlation.ID(ctx2)); len(outbox) != 0 {
		t.Fatalf("rolled-back mutation left %d outbox events", len(outbox))
	}

	// A mutation that forgets its audit row is refused and rolled back.
	err = db.Mutate(ctx, func(tx *store.Tx) error {
		return tx.CreateOrg(ctx, iam.Org{ID: newID(), Slug: "unaudited", Name: "U", CreatedAt: time.Now()})
	})
	if !errors.Is(err, store.ErrNoAudit) {
		t.Fatalf("unaudited mutation: %v", err)
	}
	if _, err := db.Queries().GetOrgBySlug(ctx, "unaudited"); !errors.Is(err, store.ErrNotFound) {
		t.Fatal("unaudited mutation was committed")
	}
}

func testIdempotency(t *testing.T, db *store.DB) {
	ctx := context.Background()
	q := db.Queries()
	now := time.Now()
	rec := store.IdempotencyRecord{Principal: "user:1", Key: "k1", Method: "POST", Path: "/x", RequestHash: "h1", CreatedAt: now, ExpiresAt: now.Add(time.Hour), ClaimID: "c1"}
	if err := q.ClaimIdempotencyKey(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if err := q.ClaimIdempotencyKey(ctx, rec); !errors.Is(err, store.ErrAlreadyExists) {
		t.Fatalf("second claim: %v", err)
	}
	// Another principal's key of the same name is separate.
	other := rec
	other.Principal = "user:2"
	if err := q.ClaimIdempotencyKey(ctx, other); err != nil {
		t.Fatalf("other principal: %v", err)
	}
	if err := q.CompleteIdempotencyKey(ctx, store.IdempotencyClaim{Principal: "user:1", Key: "k1", ClaimID: "other-claim"}, 201, nil, "", nil); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("completed under another claim: %v", err)
	}
	headers := map[string]string{"Location": "/api/v1/projects/p/operations/o", "ETag": `"v1"`}
	if err := q.CompleteIdempotencyKey(ctx, store.IdempotencyClaim{Principal: "user:1", Key: "k1", ClaimID: "c1"}, 201, []byte(`{"a":1}`), "application/json", headers); err != nil {
		t.Fatal(err)
	}
	got, err := q.GetIdempotencyRecord(ctx, "user:1", "k1")
	if err != nil || got.State != "complete" || got.StatusCode != 201 || string(got.Body) != `{"a":1}` || got.RequestHash != "h1" ||
		!maps.Equal(got.Headers, headers) {
		t.Fatalf("record = %+v, %v", got, err)
	}
	// An answer without headers to repeat keeps none (as records from
	// before the column do).
	if err := q.CompleteIdempotencyKey(ctx, store.IdempotencyClaim{Principal: "user:2", Key: "k1", ClaimID: "c1"}, 200, nil, "", nil); err != nil {
		t.Fatal(err)
	}
	if got, err := q.GetIdempotencyRecord(ctx, "user:2", "k1"); err != nil || got.Headers != nil || got.State != "complete" {
		t.Fatalf("record without headers = %+v, %v", got, err)
	}
	// An expired key can be claimed again.
	exp := rec
	exp.Key = "k2"
	exp.ExpiresAt = now.Add(-time.Second)
	exp.CreatedAt = now.Add(-time.Hour)
	if err := q.ClaimIdempotencyKey(ctx, exp); err != nil {
		t.Fatal(err)
	}
	exp.CreatedAt, exp.ExpiresAt = now, now.Add(time.Hour)
	if err := q.ClaimIdempotencyKey(ctx, exp); err != nil {
		t.Fatalf("reclaim expired: %v", err)
	}
	// An in-flight claim whose server died is reclaimable after a while, a
	// fresh one is not.
	stale := rec
	stale.Key, stale.CreatedAt = "k3", now.Add(-store.AbandonedAfter-time.Second)
	if err := q.ClaimIdempotencyKey(ctx, stale); err != nil {
		t.Fatal(err)
	}
	fresh := stale
	fresh.CreatedAt = now
	if err := q.ClaimIdempotencyKey(ctx, fresh); err != nil {
		t.Fatalf("abandoned in-flight claim not reclaimable: %v", err)
	}
	if err := q.ClaimIdempotencyKey(ctx, fresh); !errors.Is(err, store.ErrAlreadyExists) {
		t.Fatalf("a fresh in-flight claim was taken over: %v", err)
	}
	n, err := q.PurgeExpiredIdempotencyKeys(ctx, now.Add(2*time.Hour))
	if err != nil || n != 4 {
		t.Fatalf("purge = %d, %v", n, err)
	}
}

// A keyed request's commit is recorded in its mutation's transaction: once
// committed, the key is never handed to a retry (not when stale, not when
// the request answered 500), and a request whose claim was taken over
// cannot commit at all.
func testIdempotencyCommit(t *testing.T, db *store.DB) {
	q := db.Queries()
	now := time.Now()
	claimed := func(key, claimID string, created time.Time) store.IdempotencyClaim {
		t.Helper()
		rec := store.IdempotencyRecord{Principal: "user:c", Key: key, Method: "POST", Path: "/x", RequestHash: "h", CreatedAt: created,
			ExpiresAt: now.Add(time.Hour), ClaimID: claimID}
		if err := q.ClaimIdempotencyKey(context.Background(), rec); err != nil {
			t.Fatalf("claim %s/%s: %v", key, claimID, err)
		}
		return store.IdempotencyClaim{Principal: "user:c", Key: key, ClaimID: claimID}
	}
	createOrg := func(c store.IdempotencyClaim, slug string) error {
		ctx := store.WithIdempotencyClaim(context.Background(), c)
		return db.Mutate(ctx, func(tx *store.Tx) error {
			o := iam.Org{ID: newID(), Slug: slug, Name: slug, CreatedAt: time.Now()}
			if err := tx.CreateOrg(ctx, o); err != nil {
				return err
			}
			return tx.Audit(store.AuditEvent{Action: "org.create", ResourceType: "org", ResourceID: o.ID}, nil, o)
		})
	}
	// Committed, then the server died before answering: stale but kept.
	c := claimed("kc", "first", now.Add(-store.AbandonedAfter-time.Minute))
	if err := createOrg(c, "idem-commit-a"); err != nil {
		t.Fatal(err)
	}
	got, err := q.GetIdempotencyRecord(context.Background(), "user:c", "kc")
	if err != nil || got.CommittedAt.IsZero() || got.ResourceType != "org" || got.ResourceID == "" || got.State != "in_flight" {
		t.Fatalf("after commit: %+v %v", got, err)
	}
	if err := q.ReleaseIdempotencyKey(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	retry := store.IdempotencyRecord{Principal: "user:c", Key: "kc", Method: "POST", Path: "/x", RequestHash: "h", CreatedAt: now,
		ExpiresAt: now.Add(time.Hour), ClaimID: "retry"}
	if err := q.ClaimIdempotencyKey(context.Background(), retry); !errors.Is(err, store.ErrAlreadyExists) {
		t.Fatalf("a committed key was handed to a retry: %v", err)
	}
	// Stale and never committed: a retry takes it over, and the original
	// request can then no longer commit (nothing of it is written).
	old := claimed("kt", "original", now.Add(-store.AbandonedAfter-time.Second))
	took := claimed("kt", "retry", now)
	err = createOrg(old, "idem-commit-lost")
	if e, ok := errdefs.As(err); !ok || e.Code != "idempotency_claim_lost" {
		t.Fatalf("a taken-over claim committed: %v", err)
	}
	if _, err := q.GetOrgBySlug(context.Background(), "idem-commit-lost"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the refused change was written: %v", err)
	}
	if err := createOrg(took, "idem-commit-won"); err != nil {
		t.Fatalf("the retry's claim: %v", err)
	}
	// A second mutation of the same request under its claim is fine.
	if err := createOrg(took, "idem-commit-won-2"); err != nil {
		t.Fatalf("second mutation of one request: %v", err)
	}
}

func testAuditFilters(t *testing.T, db *store.DB) {
	ctx := correlation.With(context.Background(), "filters")
	t0 := time.Now().Add(-time.Hour)
	for i, a := range []string{"a.one", "a.two", "a.one"} {
		at := t0.Add(time.Duration(i) * time.Minute)
		if err := db.Mutate(ctx, func(tx *store.Tx) error {
			return tx.Audit(store.AuditEvent{Action: a, ResourceType: "thing", ProjectID: "p-filter", OccurredAt: at}, nil, nil)
		}); err != nil {
			t.Fatal(err)
		}
	}
	evs, _, err := db.Queries().ListAudit(ctx, store.AuditFilter{ProjectID: "p-filter", Action: "a.one"}, store.Page{})
	if err != nil || len(evs) != 2 {
		t.Fatalf("by action: %d %v", len(evs), err)
	}
	evs, _, _ = db.Queries().ListAudit(ctx, store.AuditFilter{ProjectID: "p-filter", Since: t0.Add(30 * time.Second), Until: t0.Add(90 * time.Second)}, store.Page{})
	if len(evs) != 1 || evs[0].Action != "a.two" {
		t.Fatalf("time range: %+v", evs)
	}
}

// Many goroutines writing at once must all succeed: on SQLite this exercises
// WAL + busy_timeout + BEGIN IMMEDIATE; on PostgreSQL, plain concurrency.
func testConcurrentWriters(t *testing.T, db *store.DB) {
	ctx := context.Background()
	o := mkOrg(t, db, "busy")
	const writers, each = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				err := db.Mutate(ctx, func(tx *store.Tx) error {
					// Read then write in one transaction: the pattern that
					// deadlocks SQLite without BEGIN IMMEDIATE.
					if _, err := tx.GetOrg(ctx, o.ID); err != nil {
						return err
					}
					p := iam.Project{ID: newID(), OrgID: o.ID, Slug: fmt.Sprintf("w%d-%d", w, i), Name: "n", CreatedAt: time.Now()}
					if err := tx.CreateProject(ctx, p); err != nil {
						return err
					}
					return tx.Audit(store.AuditEvent{Action: "project.create", ResourceType: "project", ResourceID: p.ID}, nil, nil)
				})
				if err != nil {
					errs <- err
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent write failed: %v", err)
	}
	ps, _, err := db.Queries().ListProjects(ctx, o.ID, nil, store.Page{Limit: store.MaxPageLimit})
	if err != nil || len(ps) != writers*each {
		t.Fatalf("projects = %d, %v", len(ps), err)
	}
}

func testSchemaVersion(t *testing.T, db *store.DB) {
	ctx := context.Background()
	if err := db.CheckSchema(ctx); err != nil {
		t.Fatalf("fresh migrated db: %v", err)
	}
	if n, err := db.Migrate(ctx); err != nil || n != 0 {
		t.Fatalf("re-migrate applied %d, %v", n, err)
	}
}

func TestRefusesNewerSchema(t *testing.T) {
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		ctx := context.Background()
		db := storetest.Open(t, d)
		latest := store.LatestVersion(d)
		if err := db.InTx(ctx, func(q *store.Queries) error {
			return store.ForceSchemaVersionForTest(ctx, q, latest+1)
		}); err != nil {
			t.Fatal(err)
		}
		var tooNew store.ErrSchemaTooNew
		if err := db.CheckSchema(ctx); !errors.As(err, &tooNew) {
			t.Fatalf("CheckSchema = %v, want ErrSchemaTooNew", err)
		}
		if _, err := db.Migrate(ctx); !errors.As(err, &tooNew) {
			t.Fatalf("Migrate = %v, want ErrSchemaTooNew", err)
		}
	})
}

// Every OnEventsCommitted registration runs: a second one does not replace
// the first (a single slot did, silently).
func TestEventsCommittedHooksAllRun(t *testing.T) {
	db := storetest.Open(t, store.SQLite)
	var first, second int
	db.OnEventsCommitted(func() { first++ })
	db.OnEventsCommitted(func() { second++ })
	err := db.Mutate(context.Background(), func(tx *store.Tx) error {
		if err := tx.Emit(store.Event{Type: "test.hooks"}, nil); err != nil {
			return err
		}
		return tx.Audit(store.AuditEvent{Action: "test.hooks", ResourceType: "test"}, nil, nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	if first != 1 || second != 1 {
		t.Errorf("hooks ran %d and %d times; want 1 and 1", first, second)
	}
}
