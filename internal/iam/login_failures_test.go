package iam_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/storage"
	"github.com/gpuaas/gpuaas/internal/store"
)

func throttleUnavailable(err error) bool {
	e, ok := errdefs.As(err)
	return ok && e.Kind == errdefs.KindUnavailable && e.Code == "login_throttle_unavailable" &&
		e.Details[errdefs.RetryAfterDetail] != nil
}

// An attempt the database cannot count gets no password check: a store
// whose writes fail while a DELETE still goes through (a full disk,
// PostgreSQL refusing writes near xid wraparound) answers the wrong and the
// right password alike with 503, checking neither. A success whose clear
// fails is answered all the same: its check was counted before it ran. A
// refusal whose count cannot be read back for its Retry-After is a 503,
// still without a check.
func TestLoginFailsClosedWhenAttemptsCannotBeCounted(t *testing.T) {
	svc, q, _ := newLoginService(t)
	ctx := context.Background()
	failing := func(op string) {
		q.throttleFail = func(got string) error {
			if got == op {
				return storage.ErrUnavailable
			}
			return nil
		}
	}
	login := func(password string, want int, checked bool) {
		t.Helper()
		lookups := q.lookups
		got, err := svc.Login(ctx, "ada@example.com", password)
		e, _ := errdefs.As(err)
		switch {
		case want == 503 && throttleUnavailable(err) && got.AccessToken == "":
		case want == 401 && e != nil && e.Kind == errdefs.KindUnauthenticated:
		case want == 200 && err == nil && got.AccessToken != "":
		default:
			t.Fatalf("%s: %+v, %v; want %d", password, got, err, want)
		}
		if did := q.lookups != lookups; did != checked {
			t.Fatalf("%s answered %d: password checked %v, want %v", password, want, did, checked)
		}
	}
	failing("count")
	login("wrong-password", 503, false)
	login("right-password", 503, false)
	failing("clear")
	login("wrong-password", 401, true)
	login("right-password", 200, true)
	q.throttleFail = nil
	login("right-password", 200, true) // clears what the failed clear left
	for range iam.LoginFreeFailures {
		login("wrong-password", 401, true)
	}
	failing("read")
	login("right-password", 503, false)
}

// Failures are counted under a hash keyed by the server's key: not the
// email, nor its plain SHA-256 (which anyone could compute for a guessed
// address), the same on every replica with the same key, different under
// another key.
func TestLoginFailuresAreCountedUnderAKeyedHash(t *testing.T) {
	const email = "nobody@example.com"
	account := func(key byte) string {
		svc, q, _ := newLoginServiceOn(t, store.SQLite, bytes.Repeat([]byte{key}, 32))
		if _, err := svc.Login(context.Background(), email, "wrong-password"); err == nil {
			t.Fatal("an unknown email signed in")
		}
		if len(q.counted) != 1 {
			t.Fatalf("counted %d attempts for one wrong password", len(q.counted))
		}
		return q.counted[0]
	}
	a, again, other := account(3), account(3), account(4)
	plain := sha256.Sum256([]byte(email))
	if strings.Contains(a, "nobody") || a == hex.EncodeToString(plain[:]) {
		t.Fatalf("failures counted under %q: the email, or its unkeyed hash", a)
	}
	if a != again {
		t.Fatalf("two services with one key count one email under %q and %q", a, again)
	}
	if a == other {
		t.Fatal("two keys count an email under the same account")
	}
	// Without a key there is no hash to count under: sign-in refuses.
	svc, _, _ := newLoginServiceOn(t, store.SQLite, nil)
	if _, err := svc.Login(context.Background(), email, "wrong-password"); errdefs.KindOf(err) != errdefs.KindInternal {
		t.Fatalf("sign-in without a login key: %v", err)
	}
}

// Each recorded failure prunes a few accounts whose failures have lapsed
// (two), so the table does not keep every email ever tried; accounts still
// inside their lapse are kept.
func TestLoginFailuresPruneLapsedAccounts(t *testing.T) {
	svc, q, clk := newLoginService(t)
	ctx := context.Background()
	fail := func(email string) {
		t.Helper()
		if _, err := svc.Login(ctx, email, "wrong-password"); errdefs.KindOf(err) != errdefs.KindUnauthenticated {
			t.Fatalf("wrong password for %s: %v", email, err)
		}
	}
	for _, email := range []string{"a@example.com", "b@example.com", "c@example.com"} {
		fail(email)
	}
	clk.Advance(iam.LoginFailureWindow + iam.LoginMaxBackoff - time.Second)
	fail("d@example.com") // within every lapse: nothing goes
	clk.Advance(2 * time.Second)
	fail("e@example.com") // a, b and c have lapsed: two of them go
	left := 0
	for _, account := range q.counted {
		n, _, err := q.Queries.LoginFailures(ctx, account)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			left++
		}
	}
	if left != 3 {
		t.Fatalf("%d of 5 accounts left, want 3 (one lapsed, d and e)", left)
	}
}

// A client that hangs up once its password was read still has its failure
// counted: hanging up is no way around the lockout.
func TestLoginCountsTheFailuresOfClientsThatHangUp(t *testing.T) {
	svc, q, _ := newLoginService(t)
	for range iam.LoginFreeFailures {
		ctx, cancel := context.WithCancel(context.Background())
		q.after = func(iam.User) { cancel() }
		_, _ = svc.Login(ctx, "ada@example.com", "wrong-password")
		cancel()
	}
	q.after = nil
	if _, err := svc.Login(context.Background(), "ada@example.com", "wrong-password"); !rateLimited(err) {
		t.Fatalf("after %d wrong passwords whose clients hung up: %v, want 429", iam.LoginFreeFailures, err)
	}
}

// After the free failures each attempt waits a back-off that doubles with
// every failure up to the cap, told in Retry-After; another account is
// untouched, and a success gives the full budget back.
func TestLoginThrottleBackoff(t *testing.T) {
	svc, _, clk := newLoginService(t)
	ctx := context.Background()
	wrong := func() {
		t.Helper()
		if _, err := svc.Login(ctx, "ada@example.com", "wrong-password"); errdefs.KindOf(err) != errdefs.KindUnauthenticated {
			t.Fatalf("wrong password: %v, want 401", err)
		}
	}
	retry := func() int {
		t.Helper()
		_, err := svc.Login(ctx, "ada@example.com", "right-password")
		e, ok := errdefs.As(err)
		if !ok || e.Kind != errdefs.KindRateLimited || e.Code != "too_many_login_attempts" {
			t.Fatalf("attempt past the limit: %v", err)
		}
		return e.Details[errdefs.RetryAfterDetail].(int)
	}
	for range iam.LoginFreeFailures {
		wrong()
	}
	if got := retry(); got != 1 {
		t.Fatalf("first back-off %ds, want 1s", got)
	}
	if _, err := svc.Login(ctx, "bob@example.com", "wrong-password"); errdefs.KindOf(err) != errdefs.KindUnauthenticated {
		t.Fatalf("another account: %v, want 401", err)
	}
	prev := 1
	for i := range 12 {
		clk.Advance(time.Duration(prev) * time.Second)
		wrong()
		got, want := retry(), min(prev*2, int(iam.LoginMaxBackoff/time.Second))
		if got != want {
			t.Fatalf("back-off after failure %d: %ds, want %ds", i, got, want)
		}
		prev = got
	}
	clk.Advance(iam.LoginMaxBackoff)
	if got, err := svc.Login(ctx, "ada@example.com", "right-password"); err != nil || got.AccessToken == "" {
		t.Fatalf("right password after the back-off: %+v, %v", got, err)
	}
	for range iam.LoginFreeFailures {
		wrong()
	}
}

// A client that hangs up while its attempt is being counted gets its
// context's error, and no ERROR line: nothing is wrong with the database.
func TestLoginHangUpDuringTheCountIsNoAlarm(t *testing.T) {
	svc, q, _ := newLoginService(t)
	var logs bytes.Buffer
	svc.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	ctx, cancel := context.WithCancel(context.Background())
	q.throttleFail = func(op string) error {
		if op == "count" {
			cancel() // the client hangs up while the database works
			return storage.ErrUnavailable
		}
		return nil
	}
	_, err := svc.Login(ctx, "ada@example.com", "right-password")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("sign-in whose client hung up during the count: %v, want context.Canceled", err)
	}
	if strings.Contains(logs.String(), "level=ERROR") {
		t.Fatalf("a client hanging up was logged as an error:\n%s", logs.String())
	}
	if q.lookups != 0 {
		t.Fatal("an attempt that was not counted went on to the password check")
	}
}
