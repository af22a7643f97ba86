package iam_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/sealer"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

func newTokens(t testing.TB) (*iam.Tokens, iam.Queries) {
	db := store.IAM(storetest.Open(t, store.SQLite)).Read()
	seal, err := sealer.New(bytes.Repeat([]byte{1}, 32))
	if err != nil {
		t.Fatal(err)
	}
	ring, err := iam.LoadKeyring(context.Background(), db, seal, "access_token", nil)
	if err != nil {
		t.Fatal(err)
	}
	return iam.NewTokens(db, ring, time.Minute, time.Minute, nil), db
}

// Bearer tokens are untrusted input: nothing but a token this server signed
// may authenticate, and no input may panic.
func FuzzAuthenticate(f *testing.F) {
	tk, _ := newTokens(f)
	good, err := tk.Issue(principal.Principal{Type: principal.User, ID: "nobody"}, "")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good.AccessToken)
	f.Add("eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.")
	f.Add("a.b.c")
	f.Add("")
	f.Fuzz(func(t *testing.T, raw string) {
		p, err := tk.Authenticate(context.Background(), raw)
		if err == nil {
			t.Fatalf("token %q authenticated as %+v", raw, p)
		}
	})
}

func TestTokensRejectAlgNoneAndOtherKeys(t *testing.T) {
	tk, db := newTokens(t)
	other, _ := newTokens(t)
	u := iam.User{ID: iam.NewID(), Email: "x@example.com", PasswordHash: "h", Status: iam.UserActive, CreatedAt: time.Now()}
	if err := db.CreateUser(context.Background(), u); err != nil {
		t.Fatal(err)
	}
	mine, _ := tk.Issue(principal.Principal{Type: principal.User, ID: u.ID}, "")
	if _, err := tk.Authenticate(context.Background(), mine.AccessToken); err != nil {
		t.Fatalf("own token refused: %v", err)
	}
	foreign, _ := other.Issue(principal.Principal{Type: principal.User, ID: u.ID}, "")
	if _, err := tk.Authenticate(context.Background(), foreign.AccessToken); err == nil {
		t.Fatal("token signed by another server's key accepted")
	}
	// Flip one byte of the signature.
	b := []byte(mine.AccessToken)
	b[len(b)-3] ^= 0x01
	if _, err := tk.Authenticate(context.Background(), string(b)); err == nil {
		t.Fatal("tampered token accepted")
	}
}
