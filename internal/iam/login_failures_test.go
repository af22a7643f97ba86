package iam_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
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

// When the failure count cannot be read, recorded or cleared, sign-in
// gives no verdict: a guess is neither checked unthrottled nor answered
// uncounted, and the right password gets no token it could not clear the
// count for. Once the store is back, the right password signs in.
func TestLoginFailsClosedWhenFailuresCannotBeCounted(t *testing.T) {
	svc, q, _ := newLoginService(t)
	ctx := context.Background()
	for _, tc := range []struct {
		failing, password string
		want              int
	}{
		{"read", "wrong-password", 503}, {"read", "right-password", 503},
		{"record", "wrong-password", 503}, {"record", "right-password", 200},
		{"clear", "wrong-password", 401}, {"clear", "right-password", 503},
	} {
		q.throttleFail = func(op string) error {
			if op == tc.failing {
				return storage.ErrUnavailable
			}
			return nil
		}
		lookups := q.lookups
		got, err := svc.Login(ctx, "ada@example.com", tc.password)
		e, _ := errdefs.As(err)
		switch {
		case tc.want == 503 && throttleUnavailable(err) && got.AccessToken == "":
		case tc.want == 401 && e != nil && e.Kind == errdefs.KindUnauthenticated:
		case tc.want == 200 && err == nil && got.AccessToken != "":
		default:
			t.Fatalf("%s failing, %s: %+v, %v; want %d", tc.failing, tc.password, got, err, tc.want)
		}
		if tc.failing == "read" && q.lookups != lookups {
			t.Fatal("with the count unreadable, a sign-in went on to the password check")
		}
	}
	q.throttleFail = nil
	if got, err := svc.Login(ctx, "ada@example.com", "right-password"); err != nil || got.AccessToken == "" {
		t.Fatalf("right password once the store is back: %+v, %v", got, err)
	}
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
		if len(q.recorded) != 1 {
			t.Fatalf("recorded %d failures for one wrong password", len(q.recorded))
		}
		return q.recorded[0]
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
	for _, account := range q.recorded {
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
