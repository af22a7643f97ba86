package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/artifacts"
	"github.com/gpuaas/gpuaas/internal/catalog"
	"github.com/gpuaas/gpuaas/internal/instances"
	"github.com/gpuaas/gpuaas/internal/nodes"
	"github.com/gpuaas/gpuaas/internal/storage"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// The conditional updates the domains rely on to make a change happen
// once hold when two transactions race, not only one after the other.
// Only PostgreSQL lets them overlap (SQLite's writers queue at BEGIN, which
// the sequential cases of the conformance suites cover): transaction B
// reads the row while A, which changed it, has not committed; B's update
// waits for A's row lock, and once A commits it must find the row no
// longer in the state it expected.
func TestConditionalUpdatesRace(t *testing.T) {
	db := storetest.Open(t, store.Postgres)
	ctx := context.Background()
	ns := store.Nodes(db)
	as := store.Artifacts(db)
	o, p := tenant(t, db, "race")
	n := mkNode(t, ns, "race", nodes.StateReady, 0, t0)

	t.Run("join_token", func(t *testing.T) {
		tok := nodes.NodeJoinToken{ID: newID(), TokenHash: newID(), CreatedBy: "a", CreatedAt: t0, ExpiresAt: at(time.Hour)}
		noErr(t, "insert", ns.Read().InsertNodeJoinToken(ctx, tok))
		err := race(t, db, ns, "node_join_tokens", func(q nodes.Queries) error {
			if _, err := q.GetNodeJoinTokenByHash(ctx, tok.TokenHash); err != nil {
				return err
			}
			return q.UseNodeJoinToken(ctx, tok.ID, newID(), t0)
		})
		wantErr(t, "second join with one token", err, storage.ErrNotFound)
	})
	t.Run("task_lease", func(t *testing.T) {
		tk := nodes.NodeTask{ID: newID(), NodeID: n.ID, Kind: "k", Payload: "p", CreatedAt: t0, UpdatedAt: t0}
		noErr(t, "insert", ns.Read().InsertNodeTask(ctx, tk))
		err := race(t, db, ns, "node_tasks", func(q nodes.Queries) error {
			return q.LeaseNodeTask(ctx, tk.ID, t0, at(time.Minute))
		})
		wantErr(t, "second lease of one task", err, storage.ErrNotFound)
		got, _ := ns.Read().GetNodeTask(ctx, tk.ID)
		if got.Attempt != 1 {
			t.Fatalf("attempts after two racing leases = %d, want 1", got.Attempt)
		}
	})
	t.Run("task_complete", func(t *testing.T) {
		tk := nodes.NodeTask{ID: newID(), NodeID: n.ID, Kind: "k", Payload: "p", CreatedAt: t0, UpdatedAt: t0}
		noErr(t, "insert", ns.Read().InsertNodeTask(ctx, tk))
		err := race(t, db, ns, "node_tasks", func(q nodes.Queries) error {
			return q.CompleteNodeTask(ctx, tk.ID, nodes.TaskSucceeded, "", "", nil, t0)
		})
		wantErr(t, "second result of one task", err, storage.ErrNotFound)
	})
	t.Run("allocation_state", func(t *testing.T) {
		a := mkAllocation(o, p, n, nodes.AllocPending)
		noErr(t, "insert", ns.Read().InsertAllocation(ctx, a))
		err := race(t, db, ns, "allocations", func(q nodes.Queries) error {
			return q.SetAllocationState(ctx, a.ID, nodes.AllocPending, nodes.AllocActive, t0)
		})
		wantErr(t, "second activation", err, storage.ErrNotFound)
	})
	t.Run("credential_wrap", func(t *testing.T) {
		w := artifacts.CredentialWrap{TokenHash: newID(), Sealed: "s", CreatedAt: t0, ExpiresAt: at(time.Hour)}
		noErr(t, "insert", as.Read().InsertCredentialWrap(ctx, w))
		err := race(t, db, as, "credential_wraps", func(q artifacts.Queries) error {
			_, err := q.ConsumeCredentialWrap(ctx, w.TokenHash, t0)
			return err
		})
		wantErr(t, "second unwrap", err, storage.ErrNotFound)
	})
	t.Run("artifact_state", func(t *testing.T) {
		a := mkAppArtifact(o, p, "race", "1", "main", "d")
		noErr(t, "insert", as.Read().InsertAppArtifact(ctx, a))
		next := a
		next.LifecycleState, next.UpdatedAt = artifacts.StateStaged, at(time.Minute)
		err := race(t, db, as, "app_artifacts", func(q artifacts.Queries) error {
			return q.UpdateAppArtifactState(ctx, next, artifacts.StateDraft, artifacts.TrustUnverified, false)
		})
		wantErr(t, "second transition from draft", err, storage.ErrNotFound)
	})
}

// race runs op in transaction A and, while A holds what op locked, in
// transaction B; once B waits on A's lock it commits A and returns B's
// error.
func race[T storage.Tx, Q any](t *testing.T, db *store.DB, s storage.Store[T, Q], table string, op func(q Q) error) error {
	t.Helper()
	ctx := context.Background()
	doneA, release := make(chan error, 1), make(chan struct{})
	opA := make(chan error, 1)
	go func() {
		doneA <- s.InTx(ctx, func(q Q) error {
			err := op(q)
			opA <- err
			if err != nil {
				return err
			}
			<-release
			return nil
		})
	}()
	if err := <-opA; err != nil {
		t.Fatalf("transaction A: %v", err)
	}
	doneB := make(chan error, 1)
	go func() { doneB <- s.InTx(ctx, op) }()
	return afterLockWait(t, db, table, release, doneA, doneB)
}

// afterLockWait waits until transaction B (doneB) waits on a lock on table
// that transaction A holds until release closes; then lets A commit and
// returns B's error.
func afterLockWait(t *testing.T, db *store.DB, table string, release chan struct{}, doneA, doneB chan error) error {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := store.LockWaitersOnForTest(ctx, db, table)
		if err != nil {
			close(release)
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		select {
		case err := <-doneB:
			close(release)
			<-doneA
			t.Fatalf("transaction B finished (%v) without waiting on A's lock", err)
		default:
		}
		if time.Now().After(deadline) {
			close(release)
			t.Fatal("transaction B never waited on A's lock")
		}
		time.Sleep(2 * time.Millisecond)
	}
	close(release)
	if err := <-doneA; err != nil {
		t.Fatalf("commit A: %v", err)
	}
	return <-doneB
}

// A launch, upgrade or rollback shares the rows of the version and the
// artifacts it records an instance against (ShareAppVersion,
// ShareAppArtifact); a retire takes them exclusively (LockAppVersion, the
// artifact's state update) before it counts the instances using them. So
// a retire waits for a launch that read them first, and then counts its
// instance. A launch shares the entitlements it is recorded under
// (ShareEntitlement, ShareOrgEntitlement) the same way, so disabling one
// waits for it. Launches share them with each other.
func TestRetiresWaitForASharedLaunch(t *testing.T) {
	db := storetest.Open(t, store.Postgres)
	ctx := context.Background()
	app := mkApp(t, db, "held")
	v := mkVersion(t, db, app, "1.0.0", catalog.StatusDeprecated)
	o, p := tenant(t, db, "held")
	a := mkAppArtifact(o, p, "held", "1.0.0", "main", "sha256:held")
	noErr(t, "insert artifact", store.Artifacts(db).Read().InsertAppArtifact(ctx, a))
	ent := catalog.AppEntitlement{ID: newID(), ProjectID: p.ID, OrgID: o.ID, AppID: app.ID, AppSlug: app.Slug, Enabled: true, PolicyOverrides: []byte(`{}`),
		UpdatedBy: "user:x", CreatedAt: t0, UpdatedAt: t0}
	noErr(t, "insert entitlement", db.Queries().CreateEntitlement(ctx, ent))
	orgEnt := ent
	orgEnt.ID, orgEnt.ProjectID = newID(), ""
	noErr(t, "insert org entitlement", db.Queries().CreateOrgEntitlement(ctx, orgEnt))
	disabled := func(e catalog.AppEntitlement) catalog.AppEntitlement {
		e.Enabled, e.UpdatedAt = false, at(time.Minute)
		return e
	}
	for _, c := range []struct {
		table  string
		share  func(context.Context, instances.Queries) error
		retire func(*store.Queries) error
	}{
		{"app_versions", func(ctx context.Context, q instances.Queries) error {
			_, err := q.ShareAppVersion(ctx, v.AppSlug, v.Version)
			return err
		}, func(q *store.Queries) error {
			_, err := q.LockAppVersion(ctx, v.AppSlug, v.Version)
			return err
		}},
		{"app_artifacts", func(ctx context.Context, q instances.Queries) error {
			_, err := q.ShareAppArtifact(ctx, a.ID)
			return err
		}, func(q *store.Queries) error {
			next := a
			next.LifecycleState = artifacts.StateRetired
			return q.UpdateAppArtifactState(ctx, next, a.LifecycleState, a.TrustState, false)
		}},
		{"app_entitlements", func(ctx context.Context, q instances.Queries) error {
			_, err := q.ShareEntitlement(ctx, p.ID, app.Slug)
			return err
		}, func(q *store.Queries) error { return q.UpdateEntitlement(ctx, disabled(ent)) }},
		{"app_org_entitlements", func(ctx context.Context, q instances.Queries) error {
			_, err := q.ShareOrgEntitlement(ctx, o.ID, app.Slug)
			return err
		}, func(q *store.Queries) error { return q.UpdateOrgEntitlement(ctx, disabled(orgEnt)) }},
	} {
		t.Run(c.table, func(t *testing.T) {
			// The second launch would wait until the deadline if the first
			// held the row exclusively.
			noErr(t, "two launches at once", store.Instances(db).InTx(ctx, func(q instances.Queries) error {
				if err := c.share(ctx, q); err != nil {
					return err
				}
				second, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				return store.Instances(db).InTx(second, func(q instances.Queries) error { return c.share(second, q) })
			}))

			shared, release, doneA := make(chan error, 1), make(chan struct{}), make(chan error, 1)
			go func() {
				doneA <- store.Instances(db).InTx(ctx, func(q instances.Queries) error {
					err := c.share(ctx, q)
					shared <- err
					<-release
					return err
				})
			}()
			if err := <-shared; err != nil {
				t.Fatalf("share: %v", err)
			}
			doneB := make(chan error, 1)
			go func() {
				doneB <- db.InTx(ctx, func(q *store.Queries) error { return c.retire(q) })
			}()
			noErr(t, "retire after the launch", afterLockWait(t, db, c.table, release, doneA, doneB))
		})
	}
}

// Placements on one node (a launch's GPUs and host port, a member's
// GPUs) run one after the other: a second LockPlacement on the node waits
// until the first transaction ends, so it reads what the first recorded.
// One on another node does not wait.
func TestPlacementsOnANodeWaitForEachOther(t *testing.T) {
	db := storetest.Open(t, store.Postgres)
	ctx := context.Background()
	port := store.Instances(db)
	noErr(t, "placements on two nodes at once", port.InTx(ctx, func(q instances.Queries) error {
		if err := q.LockPlacement(ctx, "node-a"); err != nil {
			return err
		}
		other, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return port.InTx(other, func(q instances.Queries) error { return q.LockPlacement(other, "node-b") })
	}))

	noErr(t, "the second placement on node-a", race(t, db, port, "pg_advisory_xact_lock", func(q instances.Queries) error {
		return q.LockPlacement(ctx, "node-a")
	}))
}
