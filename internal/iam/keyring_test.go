package iam_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/sealer"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// openWithRaw returns a migrated database of d and a second, raw
// connection to it: what someone who can write the database can do.
func openWithRaw(t *testing.T, d store.Dialect) (*store.DB, *sql.DB) {
	t.Helper()
	url := storetest.URL(t, d)
	db, err := store.Open(context.Background(), url, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if _, err := db.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	driver, dsn := "pgx", url
	if d == store.SQLite {
		driver, dsn = "sqlite", "file:"+strings.TrimPrefix(url, "sqlite://")+"?_pragma=busy_timeout(5000)"
	}
	raw, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = raw.Close() })
	return db, raw
}

func testSealer(t *testing.T) *sealer.Sealer {
	t.Helper()
	s, err := sealer.New(bytes.Repeat([]byte{7}, sealer.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Keys are created, stored sealed and loaded back by another keyring (a
// second replica): what one signs, the other verifies.
func TestKeyringRoundTrip(t *testing.T) {
	storetest.ForEachDialect(t, func(t *testing.T, db *store.DB) {
		ctx, s := context.Background(), testSealer(t)
		a, err := iam.LoadKeyring(ctx, db.Queries(), s, "access_token", nil)
		if err != nil {
			t.Fatal(err)
		}
		b, err := iam.LoadKeyring(ctx, db.Queries(), s, "access_token", nil)
		if err != nil {
			t.Fatal(err)
		}
		kidA, _ := a.SigningKey()
		kidB, _ := b.SigningKey()
		if kidA == "" || kidA != kidB {
			t.Fatalf("second keyring signs with %q, want %q", kidB, kidA)
		}
		signed, err := a.Sign(jwt.RegisteredClaims{Subject: "ada"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := jwt.Parse(signed, b.Keyfunc, jwt.WithValidMethods([]string{"EdDSA"})); err != nil {
			t.Fatalf("the other keyring does not verify: %v", err)
		}
		rows, err := db.Queries().SigningKeys(ctx, "access_token")
		if err != nil || len(rows) != 1 {
			t.Fatalf("rows %d, err %v", len(rows), err)
		}
		if _, err := s.Open(rows[0].PrivateKey, rows[0].KID); err == nil {
			t.Fatal("a new key opens under its kid alone, unbound to its purpose")
		}
	})
}

// A key sealed for one purpose, moved by a database writer into another
// purpose's keyring, does not open there.
func TestKeyringRefusesKeyOfAnotherPurpose(t *testing.T) {
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		db, raw := openWithRaw(t, d)
		ctx, s := context.Background(), testSealer(t)
		other, err := iam.LoadKeyring(ctx, db.Queries(), s, "other_token", nil)
		if err != nil {
			t.Fatal(err)
		}
		kid, _ := other.SigningKey()
		if _, err := raw.Exec(`UPDATE signing_keys SET purpose = 'access_token' WHERE kid = '` + kid + `'`); err != nil {
			t.Fatal(err)
		}
		_, err = iam.LoadKeyring(ctx, db.Queries(), s, "access_token", nil)
		if err == nil || !strings.Contains(err.Error(), "does not open for purpose access_token") {
			t.Fatalf("loaded a keyring from another purpose's key: %v", err)
		}
		rows, err := db.Queries().SigningKeys(ctx, "access_token")
		if err != nil || len(rows) != 1 {
			t.Fatalf("rows %d, err %v", len(rows), err)
		}
		if _, err := iam.OpenSigningKey(s, "access_token", rows[0]); err == nil {
			t.Fatal("OpenSigningKey opened another purpose's key")
		}
		rows[0].Purpose = "other_token"
		if _, err := iam.OpenSigningKey(s, "access_token", rows[0]); err == nil || !strings.Contains(err.Error(), "has purpose other_token, not access_token") {
			t.Fatalf("OpenSigningKey took a row of another purpose: %v", err)
		}
	})
}

// A key sealed before purposes were bound (under its kid alone) still
// loads, and is resealed under its purpose once, with an audit row; then
// the kid alone no longer opens it.
func TestKeyringResealsLegacyKey(t *testing.T) {
	storetest.ForEachDialect(t, func(t *testing.T, db *store.DB) {
		ctx, s, q := context.Background(), testSealer(t), db.Queries()
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		kid := iam.NewID()
		legacy, err := s.Seal(priv, kid)
		if err != nil {
			t.Fatal(err)
		}
		if err := q.InsertSigningKey(ctx, iam.SigningKey{KID: kid, Purpose: "access_token", Algorithm: "EdDSA",
			PrivateKey: legacy, PublicKey: "unused", CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			ring, err := iam.LoadKeyring(ctx, q, s, "access_token", nil)
			if err != nil {
				t.Fatal(err)
			}
			if got, key := ring.SigningKey(); got != kid || !key.Equal(priv) {
				t.Fatalf("signs with %s, want the legacy key %s", got, kid)
			}
		}
		rows, err := q.SigningKeys(ctx, "access_token")
		if err != nil || len(rows) != 1 {
			t.Fatalf("rows %d, err %v", len(rows), err)
		}
		if rows[0].PrivateKey == legacy {
			t.Fatal("the legacy key was not written back resealed")
		}
		if _, err := s.Open(rows[0].PrivateKey, kid); err == nil {
			t.Fatal("the resealed key still opens under its kid alone")
		}
		if got, err := iam.OpenSigningKey(s, "access_token", rows[0]); err != nil || !bytes.Equal(got, priv) {
			t.Fatalf("resealed key does not open as an access_token key: %v", err)
		}
		audits, _, err := q.ListAudit(ctx, store.AuditFilter{Action: "signing_key.reseal"}, store.Page{})
		if err != nil {
			t.Fatal(err)
		}
		if len(audits) != 1 || audits[0].ResourceID != kid || audits[0].ActorType != "system" || audits[0].Outcome != "success" {
			t.Fatalf("reseal audit rows %+v, want one for %s", audits, kid)
		}
	})
}
