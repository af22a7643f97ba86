package serviceaccounts_test

import (
	"context"
	"crypto"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
	"github.com/gpuaas/gpuaas/client"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, servertest.LeakIgnores()...) }

const tokenPath = "/api/v1/auth/service-account/token"

// env is one test's server plus every secret it saw, for the final scan.
type env struct {
	*servertest.Server
	admin *servertest.Client

	mu      sync.Mutex
	secrets []string
}

// start runs a server; at the end of the test (after the server stopped) its
// logs, and before that every audit row, are scanned for the secrets the test
// recorded.
func start(t *testing.T, d store.Dialect) *env {
	t.Helper()
	e := &env{}
	// Registered before Start: cleanups run last-in first-out, so the log
	// scan runs once the server has stopped writing.
	t.Cleanup(func() {
		if e.Server != nil {
			e.scan(t, "server logs", e.Logs.String())
		}
	})
	e.Server = servertest.Start(t, d)
	t.Cleanup(func() { e.scanAudit(t) })
	e.admin = e.Admin()
	return e
}

func forEachDialect(t *testing.T, fn func(t *testing.T, e *env)) {
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) { fn(t, start(t, d)) })
}

func (e *env) remember(secrets ...string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range secrets {
		if s != "" {
			e.secrets = append(e.secrets, s)
		}
	}
}

func (e *env) scan(t *testing.T, where, text string) {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	if strings.Contains(text, "PRIVATE KEY") {
		t.Errorf("%s hold a PEM private key marker", where)
	}
	for _, s := range e.secrets {
		// A PEM is also looked for by its base64 body, in case of re-wrapping.
		needles := []string{s}
		if strings.Contains(s, "-----BEGIN") {
			needles = pemBodyLines(s)
		}
		for _, n := range needles {
			if strings.Contains(text, n) {
				t.Errorf("%s contain a secret issued in this test (%d chars, starting %q)", where, len(s), s[:min(12, len(s))])
			}
		}
	}
}

func pemBodyLines(p string) []string {
	var out []string
	for _, l := range strings.Split(p, "\n") {
		if l != "" && !strings.HasPrefix(l, "-----") {
			out = append(out, l)
		}
	}
	return out
}

// scanAudit scans every audit row, before and after states included.
func (e *env) scanAudit(t *testing.T) {
	t.Helper()
	var b strings.Builder
	pg := store.Page{Limit: store.MaxPageLimit}
	for {
		evs, next, err := e.DB.Queries().ListAudit(context.Background(), store.AuditFilter{}, pg)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			b.WriteString(ev.Action + " " + ev.ResourceID + " " + ev.Reason + " " + ev.ActorID + " ")
			b.Write(ev.Before)
			b.Write(ev.After)
			b.WriteByte('\n')
		}
		if next == "" {
			break
		}
		pg.Cursor = next
	}
	e.scan(t, "audit rows", b.String())
}

// createSA creates a service account in project as c and returns the key
// file of its first key.
func (e *env) createSA(t *testing.T, c *servertest.Client, projectID string, body map[string]any, headers ...string) (*servertest.Response, client.KeyFile) {
	t.Helper()
	r := c.Do("POST", "/api/v1/projects/"+projectID+"/service-accounts", body, headers...).Want(t, 201)
	e.remember(r.String("private_key_pem"))
	return r, keyFileOf(r)
}

func keyFileOf(r *servertest.Response) client.KeyFile {
	return client.KeyFile{Type: client.KeyFileType, ServiceAccountID: r.String("id"), ProjectID: r.String("project_id"),
		KeyID: r.String("key_id"), PrivateKeyPEM: r.String("private_key_pem"), TokenURL: r.String("token_url")}
}

// assertion signs an assertion with kf for the server's token URL, now.
func (e *env) assertion(t *testing.T, kf client.KeyFile) string {
	t.Helper()
	a, err := client.SignAssertion(kf, e.URL+tokenPath, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	e.remember(a)
	return a
}

// claimsMod adjusts the claims or header of a hand-made assertion.
type claimsMod func(c *jwt.RegisteredClaims, h map[string]any)

// craft signs an assertion with kf after applying mods to standard claims.
func (e *env) craft(t *testing.T, kf client.KeyFile, mods ...claimsMod) string {
	t.Helper()
	signer, alg, err := client.ParsePrivateKeyPEM(kf.PrivateKeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	c := jwt.RegisteredClaims{Issuer: kf.ServiceAccountID, Subject: kf.ServiceAccountID, Audience: jwt.ClaimStrings{e.URL + tokenPath},
		IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(5 * time.Minute)), ID: uuid.NewString()}
	tok := jwt.NewWithClaims(jwt.GetSigningMethod(alg), &c)
	tok.Header["kid"] = kf.KeyID
	for _, m := range mods {
		m(&c, tok.Header)
	}
	var key crypto.Signer = signer
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	e.remember(s)
	return s
}

// exchange posts an assertion to the token endpoint.
func (e *env) exchange(assertion string) *servertest.Response {
	r := e.Anonymous().Do("POST", tokenPath, map[string]string{"grant_type": client.GrantTypeJWTBearer, "assertion": assertion})
	e.remember(r.String("access_token"))
	return r
}

// token exchanges a fresh assertion of kf and returns a client using the token.
func (e *env) token(t *testing.T, kf client.KeyFile) *servertest.Client {
	t.Helper()
	r := e.exchange(e.assertion(t, kf)).Want(t, 200)
	return e.As(r.String("access_token"))
}

// refused checks an exchange refusal: invalid_grant, the reason, and a
// failure audit row carrying that reason and the request's correlation id.
func (e *env) refused(t *testing.T, r *servertest.Response, reason string) {
	t.Helper()
	r.Want(t, 400)
	errObj, _ := r.JSON["error"].(map[string]any)
	details, _ := errObj["details"].(map[string]any)
	if r.ErrorCode() != "invalid_grant" || details["reason"] != reason {
		t.Fatalf("want invalid_grant/%s, got %s", reason, r.Body)
	}
	e.auditedFailure(t, r, reason)
}

func (e *env) auditedFailure(t *testing.T, r *servertest.Response, reason string) {
	t.Helper()
	evs, _, err := e.DB.Queries().ListAudit(context.Background(), store.AuditFilter{CorrelationID: r.Header.Get("X-Request-ID")}, store.Page{})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 || evs[0].Outcome != "failure" || evs[0].Reason != reason || evs[0].Action != "service_account.token" {
		t.Fatalf("want one failure audit row with reason %s, got %+v", reason, evs)
	}
}
