package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/gpuaas/gpuaas/internal/console"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/instances"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// One-time UI codes redeem once, only before they expire and only for
// their own instance; console sessions end for good. Both dialects.
func TestConsoleSessionsAndUICodes(t *testing.T) {
	storetest.ForEachDialect(t, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		q := db.Queries()
		now := time.Now().UTC().Truncate(time.Microsecond)
		user := iam.User{ID: uuid.NewString(), Email: uuid.NewString() + "@example.com", PasswordHash: "x", Status: "active", CreatedAt: now}
		if err := q.CreateUser(ctx, user); err != nil {
			t.Fatal(err)
		}
		code := func(hash, instance string, expires time.Time) {
			t.Helper()
			if err := q.InsertUIOpenCode(ctx, instances.UIOpenCode{CodeHash: hash, UserID: user.ID, OrgID: "o", ProjectID: "p",
				InstanceID: instance, Port: 8080, CreatedAt: now, ExpiresAt: expires}); err != nil {
				t.Fatal(err)
			}
		}
		code("live", "inst-a", now.Add(time.Minute))
		code("expired", "inst-a", now.Add(-time.Second))
		if _, err := q.RedeemUIOpenCode(ctx, "live", "inst-b", now); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("another instance redeemed the code: %v", err)
		}
		c, err := q.RedeemUIOpenCode(ctx, "live", "inst-a", now)
		if err != nil || c.UserID != user.ID || c.Port != 8080 || c.UsedAt.IsZero() {
			t.Fatalf("redeem: %+v %v", c, err)
		}
		if _, err := q.RedeemUIOpenCode(ctx, "live", "inst-a", now); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("a replayed code redeemed again: %v", err)
		}
		if _, err := q.RedeemUIOpenCode(ctx, "expired", "inst-a", now); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("an expired code redeemed: %v", err)
		}

		s := console.ConsoleSession{IDHash: "h1", UserID: user.ID, CSRFToken: "c", CreatedAt: now, LastSeenAt: now, ExpiresAt: now.Add(time.Hour)}
		if err := q.InsertConsoleSession(ctx, s); err != nil {
			t.Fatal(err)
		}
		if err := q.SetConsoleSessionProject(ctx, "h1", "proj"); err != nil {
			t.Fatal(err)
		}
		if err := q.TouchConsoleSession(ctx, "h1", now.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		got, err := q.GetConsoleSession(ctx, "h1")
		if err != nil || got.ProjectID != "proj" || !got.LastSeenAt.Equal(now.Add(time.Minute)) || !got.EndedAt.IsZero() {
			t.Fatalf("session: %+v %v", got, err)
		}
		if err := q.EndConsoleSession(ctx, "h1", now.Add(2*time.Minute)); err != nil {
			t.Fatal(err)
		}
		if got, _ := q.GetConsoleSession(ctx, "h1"); got.EndedAt.IsZero() {
			t.Error("an ended session does not say so")
		}
		// An ended session stays ended: no touch or switch revives it.
		if err := q.TouchConsoleSession(ctx, "h1", now.Add(3*time.Minute)); err != nil {
			t.Fatal(err)
		}
		if got, _ := q.GetConsoleSession(ctx, "h1"); got.EndedAt.IsZero() || got.LastSeenAt.After(now.Add(time.Minute)) {
			t.Errorf("an ended session was touched: %+v", got)
		}
		if _, err := q.GetConsoleSession(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("unknown session: %v", err)
		}
	})
}
