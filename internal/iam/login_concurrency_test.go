package iam_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/clock"
	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/sealer"
	"github.com/gpuaas/gpuaas/internal/storage"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// gatedStore wraps the IAM store so a test sees (and holds) each sign-in
// that gets as far as looking up the user, the step before the password
// check.
type gatedStore struct {
	iam.Store
	q *gatedQueries
}

func (g gatedStore) Read() iam.Queries { return g.q }

type gatedQueries struct {
	iam.Queries
	mu       sync.Mutex
	cond     *sync.Cond
	lookups  int // sign-ins that reached the user lookup
	refused  int // sign-ins the test saw refused by the throttle
	expected int // while set, lookups wait until lookups+refused reach it
	fail     func() error
	after    func(iam.User) // runs once the user was read, before the password check
	// throttleFail, when set, is the error of the throttle's store calls
	// it returns one for ("count", "read", "clear").
	throttleFail func(op string) error
	counted      []string // the accounts attempts were counted under
}

func (g *gatedQueries) throttleErr(op string) error {
	g.mu.Lock()
	fail := g.throttleFail
	g.mu.Unlock()
	if fail == nil {
		return nil
	}
	return fail(op)
}

func (g *gatedQueries) CountLoginAttempt(ctx context.Context, account string, at time.Time) (int, bool, error) {
	if err := g.throttleErr("count"); err != nil {
		return 0, false, err
	}
	n, ok, err := g.Queries.CountLoginAttempt(ctx, account, at)
	if ok {
		g.mu.Lock()
		g.counted = append(g.counted, account)
		g.mu.Unlock()
	}
	return n, ok, err
}

func (g *gatedQueries) LoginFailures(ctx context.Context, account string) (int, time.Time, error) {
	if err := g.throttleErr("read"); err != nil {
		return 0, time.Time{}, err
	}
	return g.Queries.LoginFailures(ctx, account)
}

func (g *gatedQueries) ClearLoginFailures(ctx context.Context, account string) error {
	if err := g.throttleErr("clear"); err != nil {
		return err
	}
	return g.Queries.ClearLoginFailures(ctx, account)
}

func (g *gatedQueries) GetUserByEmail(ctx context.Context, email string) (iam.User, error) {
	g.mu.Lock()
	g.lookups++
	g.cond.Broadcast()
	for g.expected > 0 && g.lookups+g.refused < g.expected {
		g.cond.Wait()
	}
	fail := g.fail
	g.mu.Unlock()
	if fail != nil {
		if err := fail(); err != nil {
			return iam.User{}, err
		}
	}
	u, err := g.Queries.GetUserByEmail(ctx, email)
	if err == nil && g.after != nil {
		g.after(u)
	}
	return u, err
}

func (g *gatedQueries) sawRefusal() {
	g.mu.Lock()
	g.refused++
	g.cond.Broadcast()
	g.mu.Unlock()
}

func newLoginService(t *testing.T) (*iam.Service, *gatedQueries, *clock.Manual) {
	t.Helper()
	return newLoginServiceOn(t, store.SQLite, bytes.Repeat([]byte{2}, 32))
}

func newLoginServiceOn(t *testing.T, d store.Dialect, loginKey []byte) (*iam.Service, *gatedQueries, *clock.Manual) {
	t.Helper()
	st := store.IAM(storetest.Open(t, d))
	seal, err := sealer.New(bytes.Repeat([]byte{1}, 32))
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewManual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	ring, err := iam.LoadKeyring(context.Background(), st.Read(), seal, "access_token", clk.Now)
	if err != nil {
		t.Fatal(err)
	}
	hash, err := iam.HashPassword("right-password")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Read().CreateUser(context.Background(), iam.User{ID: iam.NewID(), Email: "ada@example.com",
		PasswordHash: hash, Status: iam.UserActive, CreatedAt: clk.Now()}); err != nil {
		t.Fatal(err)
	}
	q := &gatedQueries{Queries: st.Read()}
	q.cond = sync.NewCond(&q.mu)
	svc := &iam.Service{Store: gatedStore{Store: st, q: q}, Tokens: iam.NewTokens(st.Read(), ring, time.Minute, time.Minute, clk.Now),
		Logger: slog.New(slog.DiscardHandler), Now: clk.Now, LoginKey: loginKey}
	return svc, q, clk
}

func rateLimited(err error) bool {
	e, ok := errdefs.As(err)
	return ok && e.Kind == errdefs.KindRateLimited
}

// Parallel wrong passwords for one account share its free budget: each is
// counted before its check, by one statement that refuses past the budget,
// so no more than LoginFreeFailures of them reach the password check, the
// rest are refused, and once the back-off has passed the right password
// still signs in.
func TestLoginThrottleHoldsUnderConcurrency(t *testing.T) {
	svc, q, clk := newLoginService(t)
	const parallel = 40
	// Each sign-in that reaches the lookup waits there until every other
	// one has either reached it too or been refused: without the
	// reservation all 40 pass the throttle before any failure is recorded.
	q.expected = parallel
	var wg sync.WaitGroup
	errs := make([]error, parallel)
	for i := range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = svc.Login(context.Background(), "ada@example.com", "wrong-password")
			if rateLimited(errs[i]) {
				q.sawRefusal()
			}
		}()
	}
	wg.Wait()
	checked := 0
	for _, err := range errs {
		switch e, _ := errdefs.As(err); {
		case rateLimited(err):
		case e != nil && e.Kind == errdefs.KindUnauthenticated:
			checked++
		default:
			t.Fatalf("parallel wrong password: %v", err)
		}
	}
	if checked > iam.LoginFreeFailures || q.lookups > iam.LoginFreeFailures {
		t.Fatalf("%d of %d parallel wrong passwords reached the password check (%d lookups), want at most %d",
			checked, parallel, q.lookups, iam.LoginFreeFailures)
	}
	q.expected = 0
	if _, err := svc.Login(context.Background(), "ada@example.com", "right-password"); !rateLimited(err) {
		t.Fatalf("right password during the back-off: %v, want 429", err)
	}
	clk.Advance(iam.LoginMaxBackoff)
	if got, err := svc.Login(context.Background(), "ada@example.com", "right-password"); err != nil || got.AccessToken == "" {
		t.Fatalf("right password after the back-off: %+v, %v", got, err)
	}
}

// An attempt that ends before its verdict (a store error, a panic) stays
// counted: it was counted before its check, and errs toward refusing.
func TestLoginAttemptsWithoutAVerdictStayCounted(t *testing.T) {
	svc, q, clk := newLoginService(t)
	q.fail = func() error { return storage.ErrUnavailable }
	for i := 0; i < iam.LoginFreeFailures-1; i++ {
		if _, err := svc.Login(context.Background(), "ada@example.com", "right-password"); !errors.Is(err, storage.ErrUnavailable) {
			t.Fatalf("store down: %v", err)
		}
	}
	q.fail = func() error { panic("store exploded") }
	func() {
		defer func() { _ = recover() }()
		_, _ = svc.Login(context.Background(), "ada@example.com", "right-password")
	}()
	q.fail = nil
	if _, err := svc.Login(context.Background(), "ada@example.com", "right-password"); !rateLimited(err) {
		t.Fatalf("right password after %d attempts without a verdict: %v, want 429", iam.LoginFreeFailures, err)
	}
	clk.Advance(iam.LoginBaseBackoff)
	if got, err := svc.Login(context.Background(), "ada@example.com", "right-password"); err != nil || got.AccessToken == "" {
		t.Fatalf("right password after the back-off: %+v, %v", got, err)
	}
}

// A password change (or a disable) that commits while a sign-in checks the
// old password cuts the token that sign-in gets: the token counts as
// issued when the account was read, not when it was minted.
func TestASignInRacingAPasswordChangeGetsACutToken(t *testing.T) {
	for _, change := range []string{"password", "disable and enable"} {
		t.Run(change, func(t *testing.T) {
			svc, q, clk := newLoginService(t)
			ctx := context.Background()
			q.after = func(u iam.User) {
				clk.Advance(time.Second)
				var err error
				if change == "password" {
					err = q.Queries.SetUserPassword(ctx, u.ID, u.PasswordHash+"-changed", clk.Now())
				} else { // what the store keeps of a disable, and then of an enable
					err = q.Queries.SetUserStatus(ctx, u.ID, iam.UserDisabled, clk.Now())
					if err == nil {
						err = q.Queries.SetUserStatus(ctx, u.ID, iam.UserActive, time.Time{})
					}
				}
				if err != nil {
					t.Error(err)
				}
				clk.Advance(time.Second)
			}
			tok, err := svc.Login(ctx, "ada@example.com", "right-password")
			if err != nil {
				t.Fatal(err)
			}
			q.after = nil
			if _, err := svc.Tokens.Authenticate(ctx, tok.AccessToken); !errors.Is(err, iam.ErrTokenRevoked) {
				t.Errorf("the token of a sign-in that raced a %s change: %v, want it revoked", change, err)
			}
		})
	}
}

// A sign-in right after a cut (an account enabled again, which cuts) gets
// a live token though it shares the cut's millisecond; one issued at the
// cut's very microsecond, or before it, is cut; a token from before
// iat_us existed is judged by the millisecond.
func TestCutByIsExactToTheMicrosecond(t *testing.T) {
	cut := time.Date(2026, 11, 28, 6, 0, 0, 500_000, time.UTC) // .000500
	at := func(ts time.Time) iam.AccessClaims {
		return iam.AccessClaims{IssuedAtMS: ts.UnixMilli(), IssuedAtUS: ts.UnixMicro()}
	}
	for _, tc := range []struct {
		name string
		c    iam.AccessClaims
		cut  bool
	}{
		{"200µs after, same millisecond", at(cut.Add(200 * time.Microsecond)), false},
		{"at the cut", at(cut), true},
		{"1µs before", at(cut.Add(-time.Microsecond)), true},
		{"no iat_us, same millisecond", iam.AccessClaims{IssuedAtMS: cut.Add(200 * time.Microsecond).UnixMilli()}, true},
		{"no iat_us, next millisecond", iam.AccessClaims{IssuedAtMS: cut.Add(time.Millisecond).UnixMilli()}, false},
	} {
		if got := tc.c.CutBy(cut); got != tc.cut {
			t.Errorf("%s: CutBy %v, want %v", tc.name, got, tc.cut)
		}
	}
}
