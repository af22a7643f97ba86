package releases_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/artifacts"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/releases"
	"github.com/gpuaas/gpuaas/internal/sealer"
	"github.com/gpuaas/gpuaas/internal/signature"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

func keySealer(t *testing.T) *sealer.Sealer {
	t.Helper()
	s, err := sealer.New(bytes.Repeat([]byte{3}, sealer.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The release key is created once, stored sealed under its purpose and
// loaded back the same by a second start.
func TestReleaseKeyRoundTrip(t *testing.T) {
	storetest.ForEachDialect(t, func(t *testing.T, db *store.DB) {
		ctx, s := context.Background(), keySealer(t)
		a, err := releases.LoadSigningKey(ctx, db.Queries(), s, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, err := releases.LoadSigningKey(ctx, db.Queries(), s, nil)
		if err != nil {
			t.Fatal(err)
		}
		if a.KID != b.KID || !bytes.Equal(a.PublicPEM(), b.PublicPEM()) {
			t.Fatalf("second load has key %s, want %s", b.KID, a.KID)
		}
		if _, err := b.Sign([]byte("manifest")); err != nil {
			t.Fatal(err)
		}
		rows, err := db.Queries().SigningKeys(ctx, releases.KeyPurpose)
		if err != nil || len(rows) != 1 {
			t.Fatalf("rows %d, err %v", len(rows), err)
		}
		if _, err := s.Open(rows[0].PrivateKey, rows[0].KID); err == nil {
			t.Fatal("the release key opens under its kid alone, unbound to its purpose")
		}
	})
}

// A key moved by a database writer into another purpose's rows does not
// open there: the registry token key as the release key, and the release
// key as a registry token key.
func TestSigningKeysRefuseKeysOfAnotherPurpose(t *testing.T) {
	loadRelease := func(ctx context.Context, q iam.KeyStore, s *sealer.Sealer) (string, error) {
		k, err := releases.LoadSigningKey(ctx, q, s, nil)
		if err != nil {
			return "", err
		}
		return k.KID, nil
	}
	loadRegistry := func(ctx context.Context, q iam.KeyStore, s *sealer.Sealer) (string, error) {
		ks, err := artifacts.LoadRegistryKeys(ctx, q, s, nil)
		if err != nil {
			return "", err
		}
		return ks.Signing().KeyID(), nil
	}
	for _, c := range []struct {
		name           string
		create, victim func(context.Context, iam.KeyStore, *sealer.Sealer) (string, error)
		into           string
	}{
		{"registry key as release key", loadRegistry, loadRelease, releases.KeyPurpose},
		{"release key as registry key", loadRelease, loadRegistry, artifacts.RegistryKeyPurpose},
	} {
		t.Run(c.name, func(t *testing.T) {
			storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
				url := storetest.URL(t, d)
				db, err := store.Open(context.Background(), url, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer db.Close()
				if _, err := db.Migrate(context.Background()); err != nil {
					t.Fatal(err)
				}
				ctx, s := context.Background(), keySealer(t)
				kid, err := c.create(ctx, db.Queries(), s)
				if err != nil {
					t.Fatal(err)
				}
				driver, dsn := "pgx", url
				if d == store.SQLite {
					driver, dsn = "sqlite", "file:"+strings.TrimPrefix(url, "sqlite://")
				}
				raw, err := sql.Open(driver, dsn)
				if err != nil {
					t.Fatal(err)
				}
				defer raw.Close()
				if _, err := raw.Exec(`UPDATE signing_keys SET purpose = '` + c.into + `' WHERE kid = '` + kid + `'`); err != nil {
					t.Fatal(err)
				}
				if _, err := c.victim(ctx, db.Queries(), s); err == nil || !strings.Contains(err.Error(), "does not open for purpose "+c.into) {
					t.Fatalf("loaded key %s moved into %s: %v", kid, c.into, err)
				}
			})
		})
	}
}

// A release key sealed before purposes were bound (under its kid alone)
// still loads, and is resealed under its purpose with an audit row.
func TestReleaseKeyResealsLegacyKey(t *testing.T) {
	storetest.ForEachDialect(t, func(t *testing.T, db *store.DB) {
		ctx, s, q := context.Background(), keySealer(t), db.Queries()
		privPEM, pubPEM, err := signature.GenerateKeyPair(signature.AlgECDSAP256)
		if err != nil {
			t.Fatal(err)
		}
		const kid = "release-legacy"
		legacy, err := s.Seal(privPEM, kid)
		if err != nil {
			t.Fatal(err)
		}
		if err := q.InsertSigningKey(ctx, iam.SigningKey{KID: kid, Purpose: releases.KeyPurpose, Algorithm: string(signature.AlgECDSAP256),
			PrivateKey: legacy, PublicKey: string(pubPEM), CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
		key, err := releases.LoadSigningKey(ctx, q, s, nil)
		if err != nil {
			t.Fatal(err)
		}
		if key.KID != kid {
			t.Fatalf("loaded %s, want the legacy key", key.KID)
		}
		rows, err := q.SigningKeys(ctx, releases.KeyPurpose)
		if err != nil || len(rows) != 1 {
			t.Fatalf("rows %d, err %v", len(rows), err)
		}
		if _, err := s.Open(rows[0].PrivateKey, kid); err == nil {
			t.Fatal("the resealed release key still opens under its kid alone")
		}
		if got, err := iam.OpenSigningKey(s, releases.KeyPurpose, rows[0]); err != nil || !bytes.Equal(got, privPEM) {
			t.Fatalf("resealed key does not open as the release key: %v", err)
		}
		audits, _, err := q.ListAudit(ctx, store.AuditFilter{Action: "signing_key.reseal", ResourceID: kid}, store.Page{})
		if err != nil || len(audits) != 1 {
			t.Fatalf("reseal audit rows %d, err %v", len(audits), err)
		}
	})
}

// staleFirstRead is a replica's view of the keys that read them before
// another replica's first key was committed: its first read finds none.
type staleFirstRead struct {
	iam.KeyStore
	read bool
}

func (s *staleFirstRead) SigningKeys(ctx context.Context, purpose string) ([]iam.SigningKey, error) {
	if !s.read {
		s.read = true
		return nil, nil
	}
	return s.KeyStore.SigningKeys(ctx, purpose)
}

// Two replicas start together on an empty table: B reads before A's key is
// committed, so both create one, and B's clock is behind A's. They must
// still sign with one key, the only one stored: a registry set up with
// A's key refused B's tokens, and the release key served by A did not
// verify B's releases.
func TestReplicasStartingTogetherShareOneKey(t *testing.T) {
	loaders := map[string]func(context.Context, iam.KeyStore, *sealer.Sealer, func() time.Time) (string, error){
		releases.KeyPurpose: func(ctx context.Context, q iam.KeyStore, s *sealer.Sealer, now func() time.Time) (string, error) {
			k, err := releases.LoadSigningKey(ctx, q, s, now)
			if err != nil {
				return "", err
			}
			return k.KID, nil
		},
		artifacts.RegistryKeyPurpose: func(ctx context.Context, q iam.KeyStore, s *sealer.Sealer, now func() time.Time) (string, error) {
			ks, err := artifacts.LoadRegistryKeys(ctx, q, s, now)
			if err != nil {
				return "", err
			}
			return ks.Signing().KeyID(), nil
		},
	}
	storetest.ForEachDialect(t, func(t *testing.T, db *store.DB) {
		ctx, s := context.Background(), keySealer(t)
		behind := func() time.Time { return time.Now().Add(-2 * time.Second) }
		for purpose, load := range loaders {
			a, err := load(ctx, db.Queries(), s, nil)
			if err != nil {
				t.Fatal(err)
			}
			b, err := load(ctx, &staleFirstRead{KeyStore: db.Queries()}, s, behind)
			if err != nil {
				t.Fatal(err)
			}
			if a != b {
				t.Errorf("%s: replica A signs with %s, replica B with %s", purpose, a, b)
			}
			if rows, err := db.Queries().SigningKeys(ctx, purpose); err != nil || len(rows) != 1 {
				t.Errorf("%s: %d keys stored (%v), want 1", purpose, len(rows), err)
			}
		}
	})
}

// Replicas on PostgreSQL that store a purpose's first key at the same
// moment, each on a pool of its own, store one between them.
func TestFirstSigningKeyStoredOnceAcrossPools(t *testing.T) {
	url := storetest.URL(t, store.Postgres)
	ctx := context.Background()
	const replicas = 8
	var pools [replicas]*store.DB
	for i := range pools {
		db, err := store.Open(ctx, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		pools[i] = db
	}
	if _, err := pools[0].Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	for round := range 5 {
		purpose := fmt.Sprintf("test_first_%d_%d", time.Now().UnixNano(), round)
		start := make(chan struct{})
		inserted := make(chan bool, replicas)
		var wg sync.WaitGroup
		for i, db := range pools {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				ok, err := db.Queries().InsertFirstSigningKey(ctx, iam.SigningKey{KID: fmt.Sprintf("%s-%d", purpose, i), Purpose: purpose,
					Algorithm: "EdDSA", PrivateKey: "sealed", PublicKey: "public", CreatedAt: time.Now()})
				if err != nil {
					t.Error(err)
				}
				inserted <- ok
			}()
		}
		close(start)
		wg.Wait()
		close(inserted)
		n := 0
		for ok := range inserted {
			if ok {
				n++
			}
		}
		rows, err := pools[0].Queries().SigningKeys(ctx, purpose)
		if err != nil {
			t.Fatal(err)
		}
		if n != 1 || len(rows) != 1 {
			t.Fatalf("round %d: %d replicas report storing the first key, %d keys stored; want 1 and 1", round, n, len(rows))
		}
	}
}
