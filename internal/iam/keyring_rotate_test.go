package iam_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

func keyAudit(action, kid string) store.AuditEvent {
	return store.AuditEvent{OccurredAt: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), ActorType: "system", ActorID: "system",
		Action: action, ResourceType: "signing_key", ResourceID: kid, Outcome: "success"}
}

// A key added by another replica (or gpuaas keys rotate) signs once a
// replica reloads, while tokens of the older key keep verifying; once the
// older key is retired and the replica reloads, its tokens are refused.
func TestKeyringRotateThenRetire(t *testing.T) {
	storetest.ForEachDialect(t, func(t *testing.T, db *store.DB) {
		ctx, s, q := context.Background(), testSealer(t), db.Queries()
		ring, err := iam.LoadKeyring(ctx, q, s, "access_token", nil)
		if err != nil {
			t.Fatal(err)
		}
		oldKID, _ := ring.SigningKey()
		old, err := ring.Sign(jwt.RegisteredClaims{Subject: "ada"})
		if err != nil {
			t.Fatal(err)
		}
		// Stamped before the key it replaces (a clock behind): it still
		// becomes the newest.
		k, err := iam.NewSigningKey(s, "access_token", func() time.Time { return time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC) })
		if err != nil {
			t.Fatal(err)
		}
		if _, err := q.AddSigningKey(ctx, k, keyAudit("signing_key.rotate", k.KID)); err != nil {
			t.Fatal(err)
		}
		if err := ring.Reload(ctx); err != nil {
			t.Fatal(err)
		}
		if kid, _ := ring.SigningKey(); kid != k.KID {
			t.Fatalf("signs with %s after the rotate, want the new key %s", kid, k.KID)
		}
		if _, err := jwt.Parse(old, ring.Keyfunc, jwt.WithValidMethods([]string{"EdDSA"})); err != nil {
			t.Fatalf("a token of the older key no longer verifies after a rotate: %v", err)
		}
		if _, err := q.RetireSigningKey(ctx, oldKID, time.Now(), keyAudit("signing_key.retire", oldKID)); err != nil {
			t.Fatal(err)
		}
		if err := ring.Reload(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := jwt.Parse(old, ring.Keyfunc, jwt.WithValidMethods([]string{"EdDSA"})); err == nil {
			t.Fatal("a token of a retired key still verifies")
		}
		for _, jwk := range ring.JWKS()["keys"] {
			if jwk.KID == oldKID {
				t.Fatal("the JWKS still publishes the retired key")
			}
		}
		audits, _, err := q.ListAudit(ctx, store.AuditFilter{ResourceType: "signing_key"}, store.Page{})
		if err != nil || len(audits) != 2 {
			t.Fatalf("audit rows %d, err %v; want the rotate's and the retire's", len(audits), err)
		}
	})
}

// Retiring refuses an unknown kid, a key already retired and the last
// unretired key of its purpose, and writes nothing then.
func TestRetireSigningKeyRefusals(t *testing.T) {
	storetest.ForEachDialect(t, func(t *testing.T, db *store.DB) {
		ctx, s, q := context.Background(), testSealer(t), db.Queries()
		ring, err := iam.LoadKeyring(ctx, q, s, "access_token", nil)
		if err != nil {
			t.Fatal(err)
		}
		only, _ := ring.SigningKey()
		if _, err := q.RetireSigningKey(ctx, "no-such-kid", time.Now(), keyAudit("signing_key.retire", "x")); errdefs.KindOf(err) != errdefs.KindNotFound {
			t.Fatalf("unknown kid: %v, want NotFound", err)
		}
		if _, err := q.RetireSigningKey(ctx, only, time.Now(), keyAudit("signing_key.retire", only)); errdefs.KindOf(err) != errdefs.KindFailedPrecondition {
			t.Fatalf("last key: %v, want FailedPrecondition", err)
		}
		if err := ring.Rotate(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := q.RetireSigningKey(ctx, only, time.Now(), keyAudit("signing_key.retire", only)); err != nil {
			t.Fatal(err)
		}
		if _, err := q.RetireSigningKey(ctx, only, time.Now(), keyAudit("signing_key.retire", only)); errdefs.KindOf(err) != errdefs.KindConflict {
			t.Fatalf("retired twice: %v, want Conflict", err)
		}
		audits, _, err := q.ListAudit(ctx, store.AuditFilter{Action: "signing_key.retire"}, store.Page{})
		if err != nil || len(audits) != 1 {
			t.Fatalf("retire audit rows %d, err %v; want the one retire that happened", len(audits), err)
		}
	})
}

// slowKeys counts the reads of the key set and makes each take a while, as
// a loaded database would.
type slowKeys struct {
	iam.KeyStore
	reads atomic.Int32
}

func (k *slowKeys) SigningKeys(ctx context.Context, purpose string) ([]iam.SigningKey, error) {
	k.reads.Add(1)
	time.Sleep(50 * time.Millisecond)
	return k.KeyStore.SigningKeys(ctx, purpose)
}

// A burst of tokens naming a key the replica does not know reads the key
// set once, not once per token: the callers that waited for a read take
// its result.
func TestKeyringReloadsOnceForABurstOfUnknownKeys(t *testing.T) {
	storetest.ForEachDialect(t, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		keys := &slowKeys{KeyStore: db.Queries()}
		ring, err := iam.LoadKeyring(ctx, keys, testSealer(t), "access_token", nil)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(iam.ReloadEvery + 100*time.Millisecond) // the load is stale now
		before := keys.reads.Load()
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() { ring.ReloadIfStale(ctx) })
		}
		wg.Wait()
		if n := keys.reads.Load() - before; n != 1 {
			t.Fatalf("%d reads of the key set for a burst of 20, want 1", n)
		}
	})
}
