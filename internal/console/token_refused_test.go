package console_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/sealer"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
)

// The console caches the token it mints for a session. Once that token is
// refused while the session stands (an operator retired the key that
// signed it: gpuaas keys), the next page mints another instead of showing
// "Refused" until the cached one runs out.
func TestConsoleMintsAgainWhenItsTokenIsRefused(t *testing.T) {
	s := servertest.Start(t, store.SQLite)
	ctx := context.Background()
	session := signIn(t, s, s.Creds.AdminEmail, s.Creds.AdminPassword)
	if code, _ := status(t, s, "/projects", session); code != http.StatusOK {
		t.Fatalf("/projects before the rotate: %d", code)
	}

	// Rotate the access-token key and retire the one the cached token has.
	q := s.DB.Queries()
	old, err := q.SigningKeys(ctx, "access_token")
	if err != nil || len(old) != 1 {
		t.Fatalf("access token keys: %v, %v", old, err)
	}
	master, err := sealer.DecodeKey(s.App.Config.SecretKey)
	if err != nil {
		t.Fatal(err)
	}
	seal, err := sealer.New(master)
	if err != nil {
		t.Fatal(err)
	}
	key, err := iam.NewSigningKey(seal, "access_token", nil)
	if err != nil {
		t.Fatal(err)
	}
	audit := func(action, kid string) store.AuditEvent {
		return store.AuditEvent{OccurredAt: time.Now(), ActorType: "system", ActorID: "system", Action: action, ResourceType: "signing_key", ResourceID: kid, Outcome: "success"}
	}
	if _, err := q.AddSigningKey(ctx, key, audit("signing_key.rotate", key.KID)); err != nil {
		t.Fatal(err)
	}
	if _, err := q.RetireSigningKey(ctx, old[0].KID, time.Now(), audit("signing_key.retire", old[0].KID)); err != nil {
		t.Fatal(err)
	}
	s.ReloadSigningKeys()

	if code, _ := status(t, s, "/projects", session); code != http.StatusOK {
		t.Fatalf("/projects once the cached token's key is retired: %d, want 200 with a new token", code)
	}
}
