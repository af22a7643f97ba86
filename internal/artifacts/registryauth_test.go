package artifacts_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/artifacts"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/registry"
	"github.com/gpuaas/gpuaas/internal/sealer"
	"github.com/gpuaas/gpuaas/internal/signature"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

func registryKeySealer(t *testing.T) *sealer.Sealer {
	t.Helper()
	s, err := sealer.New(bytes.Repeat([]byte{5}, sealer.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The registry token key is created once, stored sealed under its purpose
// and loaded back the same by a second start.
func TestRegistryKeysRoundTrip(t *testing.T) {
	storetest.ForEachDialect(t, func(t *testing.T, db *store.DB) {
		ctx, s := context.Background(), registryKeySealer(t)
		a, err := artifacts.LoadRegistryKeys(ctx, db.Queries(), s, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, err := artifacts.LoadRegistryKeys(ctx, db.Queries(), s, nil)
		if err != nil {
			t.Fatal(err)
		}
		if a.Signing().KeyID() != b.Signing().KeyID() {
			t.Fatalf("second load signs with %s, want %s", b.Signing().KeyID(), a.Signing().KeyID())
		}
		rows, err := db.Queries().SigningKeys(ctx, artifacts.RegistryKeyPurpose)
		if err != nil || len(rows) != 1 {
			t.Fatalf("rows %d, err %v", len(rows), err)
		}
		if _, err := s.Open(rows[0].PrivateKey, rows[0].KID); err == nil {
			t.Fatal("the registry key opens under its kid alone, unbound to its purpose")
		}
	})
}

// Registry token keys sealed before purposes were bound (under their kid
// alone) still load, and every one, the retired too, is resealed under its
// purpose with an audit row.
func TestRegistryKeysResealLegacyKeys(t *testing.T) {
	storetest.ForEachDialect(t, func(t *testing.T, db *store.DB) {
		ctx, s, q := context.Background(), registryKeySealer(t), db.Queries()
		at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		var kids []string
		for i := range 2 {
			k, err := registry.GenerateSigningKey(registry.EdDSA)
			if err != nil {
				t.Fatal(err)
			}
			pemBytes, err := k.MarshalPEM()
			if err != nil {
				t.Fatal(err)
			}
			pub, err := signature.MarshalPublicKeyPEM(k.Public())
			if err != nil {
				t.Fatal(err)
			}
			legacy, err := s.Seal(pemBytes, k.KeyID())
			if err != nil {
				t.Fatal(err)
			}
			row := iam.SigningKey{KID: k.KeyID(), Purpose: artifacts.RegistryKeyPurpose, Algorithm: string(k.Algorithm()),
				PrivateKey: legacy, PublicKey: string(pub), CreatedAt: at.Add(time.Duration(i) * time.Hour)}
			if i == 0 {
				row.RetiredAt = at.Add(time.Hour)
			}
			if err := q.InsertSigningKey(ctx, row); err != nil {
				t.Fatal(err)
			}
			kids = append(kids, k.KeyID())
		}
		ks, err := artifacts.LoadRegistryKeys(ctx, q, s, nil)
		if err != nil {
			t.Fatal(err)
		}
		if ks.Signing().KeyID() != kids[1] {
			t.Fatalf("signs with %s, want the legacy key %s", ks.Signing().KeyID(), kids[1])
		}
		rows, err := q.SigningKeys(ctx, artifacts.RegistryKeyPurpose)
		if err != nil || len(rows) != 2 {
			t.Fatalf("rows %d, err %v", len(rows), err)
		}
		for _, r := range rows {
			if _, err := s.Open(r.PrivateKey, r.KID); err == nil {
				t.Fatalf("registry key %s still opens under its kid alone", r.KID)
			}
			if _, err := iam.OpenSigningKey(s, artifacts.RegistryKeyPurpose, r); err != nil {
				t.Fatalf("resealed key does not open as a registry token key: %v", err)
			}
		}
		audits, _, err := q.ListAudit(ctx, store.AuditFilter{Action: "signing_key.reseal"}, store.Page{})
		if err != nil || len(audits) != 2 {
			t.Fatalf("reseal audit rows %d, err %v", len(audits), err)
		}
	})
}

// The registry token keys follow the rule of the access token keyring: the
// newest unretired key signs, the other unretired keys verify, and a
// retired key does neither.
func TestRegistryKeySetNewestSignsRetiredDropped(t *testing.T) {
	storetest.ForEachDialect(t, func(t *testing.T, db *store.DB) {
		ctx, s, q := context.Background(), registryKeySealer(t), db.Queries()
		first, err := artifacts.LoadRegistryKeys(ctx, q, s, nil)
		if err != nil {
			t.Fatal(err)
		}
		oldKID := first.Signing().KeyID()
		k, err := artifacts.NewRegistrySigningKey(s, nil)
		if err != nil {
			t.Fatal(err)
		}
		audit := store.AuditEvent{OccurredAt: time.Now(), ActorType: "system", ActorID: "system", Action: "signing_key.rotate",
			ResourceType: "signing_key", ResourceID: k.KID, Outcome: "success"}
		if _, err := q.AddSigningKey(ctx, k, audit); err != nil {
			t.Fatal(err)
		}
		ks, err := artifacts.RegistryKeySet(ctx, q, s, nil)
		if err != nil {
			t.Fatal(err)
		}
		if ks.Signing().KeyID() != k.KID {
			t.Fatalf("signs with %s, want the newest key %s", ks.Signing().KeyID(), k.KID)
		}
		if ids := ks.KeyIDs(); len(ids) != 2 || ids[1] != oldKID {
			t.Fatalf("trusted keys %v, want the new one and %s", ids, oldKID)
		}
		audit.Action, audit.ResourceID = "signing_key.retire", oldKID
		if _, err := q.RetireSigningKey(ctx, oldKID, time.Now(), audit); err != nil {
			t.Fatal(err)
		}
		if ks, err = artifacts.RegistryKeySet(ctx, q, s, nil); err != nil {
			t.Fatal(err)
		}
		if ids := ks.KeyIDs(); len(ids) != 1 || ids[0] != k.KID {
			t.Fatalf("trusted keys %v after retiring %s, want only %s", ids, oldKID, k.KID)
		}
	})
}
