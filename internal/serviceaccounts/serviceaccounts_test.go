package serviceaccounts_test

import (
	"context"
	"crypto"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/gpuaas/gpuaas/client"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/serviceaccounts"
	"github.com/gpuaas/gpuaas/internal/store"
)

// The whole life of a service account: create, exchange, use inside its
// project only, rotate, disable, enable, delete.
func TestServiceAccountLifecycle(t *testing.T) {
	forEachDialect(t, func(t *testing.T, e *env) {
		dev := e.Creds.ProjectID
		other := e.admin.Do("POST", "/api/v1/orgs/"+e.Creds.OrgID+"/projects", map[string]string{"slug": "other", "name": "Other"}).Want(t, 201).String("id")

		r, kf := e.createSA(t, e.admin, dev, map[string]any{"name": "App operator", "slug": "app-operator", "description": "automation"})
		if kf.ServiceAccountID == "" || kf.KeyID == "" || !strings.Contains(kf.PrivateKeyPEM, "BEGIN PRIVATE KEY") {
			t.Fatalf("create answer lacks id, key_id or private key: %s", r.Body)
		}
		if kf.TokenURL != e.URL+tokenPath {
			t.Fatalf("token_url %q, want %q", kf.TokenURL, e.URL+tokenPath)
		}
		if roles, _ := r.JSON["roles"].([]any); len(roles) != 1 || roles[0] != "app_operator" {
			t.Fatalf("default role: %v", r.JSON["roles"])
		}

		// Reads never show a secret.
		list := e.admin.Do("GET", "/api/v1/projects/"+dev+"/service-accounts", nil).Want(t, 200)
		one := e.admin.Do("GET", "/api/v1/projects/"+dev+"/service-accounts/"+kf.ServiceAccountID, nil).Want(t, 200)
		for _, b := range [][]byte{list.Body, one.Body} {
			if strings.Contains(string(b), "PRIVATE") || strings.Contains(string(b), "private_key") {
				t.Fatalf("a read shows a private key: %s", b)
			}
		}
		if len(list.Items()) != 1 {
			t.Fatalf("list: %s", list.Body)
		}
		// Another project does not list it, and does not know the id.
		e.admin.Do("GET", "/api/v1/projects/"+other+"/service-accounts/"+kf.ServiceAccountID, nil).Want(t, 404)

		// Exchange, then use the token.
		tr := e.exchange(e.assertion(t, kf)).Want(t, 200)
		if tr.String("token_type") != "Bearer" || tr.JSON["expires_in"] != float64(900) || tr.Header.Get("Cache-Control") != "no-store" {
			t.Fatalf("token answer: %s %v", tr.Body, tr.Header)
		}
		sa := e.As(tr.String("access_token"))
		me := sa.Do("GET", "/api/v1/me", nil).Want(t, 200)
		if me.String("type") != "service_account" || me.String("project_id") != dev || me.String("id") != kf.ServiceAccountID {
			t.Fatalf("me: %s", me.Body)
		}
		sa.Do("GET", "/api/v1/projects/"+dev, nil).Want(t, 200)
		// Outside its project: not found, never forbidden (no probing).
		sa.Do("GET", "/api/v1/projects/"+other, nil).Want(t, 404)
		sa.Do("GET", "/api/v1/projects/"+other+"/service-accounts", nil).Want(t, 404)
		// Admin endpoints and what its role lacks: denied.
		sa.Do("POST", "/api/v1/orgs", map[string]string{"slug": "evil", "name": "Evil"}).Want(t, 403)
		sa.Do("GET", "/api/v1/audit-events", nil).Want(t, 403)
		sa.Do("GET", "/api/v1/audit-events?project_id="+dev, nil).Want(t, 403)
		sa.Do("POST", "/api/v1/projects/"+dev+"/service-accounts", map[string]any{"name": "x", "slug": "child"}).Want(t, 403)
		sa.Do("POST", "/api/v1/projects/"+dev+"/members", map[string]string{"user_id": kf.ServiceAccountID, "role": "project_admin"}).Want(t, 403)
		sa.Do("POST", "/api/v1/projects/"+dev+"/service-accounts/"+kf.ServiceAccountID+"/rotate-key", map[string]any{}).Want(t, 403)

		// Rotate with grace 0: the old key and its tokens die, the new key works.
		rot := e.admin.Do("POST", "/api/v1/projects/"+dev+"/service-accounts/"+kf.ServiceAccountID+"/rotate-key",
			map[string]any{"grace_period_seconds": 0}).Want(t, 200)
		e.remember(rot.String("private_key_pem"))
		kf2 := keyFileOf(rot)
		if kf2.KeyID == kf.KeyID || kf2.PrivateKeyPEM == "" {
			t.Fatalf("rotate answer: %s", rot.Body)
		}
		e.refused(t, e.exchange(e.assertion(t, kf)), "key_revoked")
		sa.Do("GET", "/api/v1/projects/"+dev, nil).Want(t, 401)
		sa2 := e.token(t, kf2)
		sa2.Do("GET", "/api/v1/projects/"+dev, nil).Want(t, 200)

		// Disable: the live token fails on its next call; no new tokens.
		e.admin.Do("POST", "/api/v1/projects/"+dev+"/service-accounts/"+kf.ServiceAccountID+"/disable", nil).Want(t, 200)
		sa2.Do("GET", "/api/v1/projects/"+dev, nil).Want(t, 401)
		e.refused(t, e.exchange(e.assertion(t, kf2)), "account_disabled")
		// Enable: new tokens work, the token minted before the disable stays dead.
		en := e.admin.Do("POST", "/api/v1/projects/"+dev+"/service-accounts/"+kf.ServiceAccountID+"/enable", nil).Want(t, 200)
		if en.String("status") != "active" {
			t.Fatalf("enable: %s", en.Body)
		}
		sa2.Do("GET", "/api/v1/projects/"+dev, nil).Want(t, 401)
		sa3 := e.token(t, kf2)
		sa3.Do("GET", "/api/v1/projects/"+dev, nil).Want(t, 200)

		// Delete: the token fails, the key is unknown, bindings are gone.
		e.admin.Do("DELETE", "/api/v1/projects/"+dev+"/service-accounts/"+kf.ServiceAccountID, nil).Want(t, 204)
		sa3.Do("GET", "/api/v1/projects/"+dev, nil).Want(t, 401)
		e.refused(t, e.exchange(e.assertion(t, kf2)), "unknown_key")
		if bs, _ := e.DB.Queries().BindingsOfPrincipal(context.Background(), string(principal.ServiceAccount), kf.ServiceAccountID); len(bs) != 0 {
			t.Fatalf("bindings left after delete: %+v", bs)
		}
		e.admin.Do("GET", "/api/v1/projects/"+dev+"/service-accounts/"+kf.ServiceAccountID, nil).Want(t, 404)

		// One success audit row per mutation is checked by servertest; the
		// actions are the documented ones.
		for _, action := range []string{"service_account.create", "service_account.rotate_key", "service_account.disable", "service_account.enable", "service_account.delete"} {
			evs, _, _ := e.DB.Queries().ListAudit(context.Background(), store.AuditFilter{Action: action, ResourceID: kf.ServiceAccountID}, store.Page{})
			if len(evs) != 1 || evs[0].ProjectID != dev {
				t.Errorf("audit rows for %s: %+v", action, evs)
			}
		}
	})
}

func TestExchangeRefusals(t *testing.T) {
	forEachDialect(t, func(t *testing.T, e *env) {
		dev := e.Creds.ProjectID
		_, kf := e.createSA(t, e.admin, dev, map[string]any{"name": "A", "slug": "sa-a"})
		_, other := e.createSA(t, e.admin, dev, map[string]any{"name": "B", "slug": "sa-b", "key_algorithm": "ES256"})

		// The same assertion twice: the second is a replay.
		a := e.assertion(t, kf)
		e.exchange(a).Want(t, 200)
		e.refused(t, e.exchange(a), "replayed_assertion")

		cases := []struct {
			name, reason string
			assertion    func() string
		}{
			{"aud of another server", "invalid_audience", func() string {
				return e.craft(t, kf, func(c *jwt.RegisteredClaims, _ map[string]any) {
					c.Audience = jwt.ClaimStrings{"https://other.example" + tokenPath}
				})
			}},
			{"two audiences", "invalid_audience", func() string {
				return e.craft(t, kf, func(c *jwt.RegisteredClaims, _ map[string]any) {
					c.Audience = append(c.Audience, "https://other.example")
				})
			}},
			{"expired", "assertion_expired", func() string {
				return e.craft(t, kf, func(c *jwt.RegisteredClaims, _ map[string]any) {
					c.IssuedAt = jwt.NewNumericDate(time.Now().Add(-30 * time.Minute))
					c.ExpiresAt = jwt.NewNumericDate(time.Now().Add(-2 * time.Minute))
				})
			}},
			{"issued in the future", "issued_in_future", func() string {
				return e.craft(t, kf, func(c *jwt.RegisteredClaims, _ map[string]any) {
					c.IssuedAt = jwt.NewNumericDate(time.Now().Add(5 * time.Minute))
					c.ExpiresAt = jwt.NewNumericDate(time.Now().Add(10 * time.Minute))
				})
			}},
			{"lifetime over an hour", "invalid_lifetime", func() string {
				return e.craft(t, kf, func(c *jwt.RegisteredClaims, _ map[string]any) {
					c.ExpiresAt = jwt.NewNumericDate(time.Now().Add(2 * time.Hour))
				})
			}},
			{"unknown kid", "unknown_key", func() string {
				return e.craft(t, kf, func(_ *jwt.RegisteredClaims, h map[string]any) { h["kid"] = iam.NewID() })
			}},
			{"no kid", "missing_kid", func() string {
				return e.craft(t, kf, func(_ *jwt.RegisteredClaims, h map[string]any) { delete(h, "kid") })
			}},
			{"iss is not sub", "invalid_issuer", func() string {
				return e.craft(t, kf, func(c *jwt.RegisteredClaims, _ map[string]any) { c.Subject = other.ServiceAccountID })
			}},
			{"no jti", "missing_jti", func() string {
				return e.craft(t, kf, func(c *jwt.RegisteredClaims, _ map[string]any) { c.ID = "" })
			}},
			{"key of another account", "key_account_mismatch", func() string {
				// Signed by B's key, claiming to be A.
				k := other
				k.ServiceAccountID = kf.ServiceAccountID
				return e.craft(t, k)
			}},
			{"tampered signature", "invalid_signature", func() string {
				p := strings.Split(e.craft(t, kf), ".")
				sig, _ := base64.RawURLEncoding.DecodeString(p[2])
				sig[0] ^= 1
				p[2] = base64.RawURLEncoding.EncodeToString(sig)
				return strings.Join(p, ".")
			}},
			{"tampered claims", "invalid_signature", func() string {
				p := strings.Split(e.craft(t, kf), ".")
				p[1] = strings.Split(e.craft(t, kf, func(c *jwt.RegisteredClaims, _ map[string]any) {
					c.ExpiresAt = jwt.NewNumericDate(time.Now().Add(50 * time.Minute))
				}), ".")[1]
				return strings.Join(p, ".")
			}},
			{"alg none", "unsupported_algorithm", func() string {
				tok := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.RegisteredClaims{Issuer: kf.ServiceAccountID, Subject: kf.ServiceAccountID})
				tok.Header["kid"] = kf.KeyID
				s, _ := tok.SignedString(jwt.UnsafeAllowNoneSignatureType)
				return s
			}},
			{"HS256 with the public key as secret", "unsupported_algorithm", func() string {
				tok := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.RegisteredClaims{Issuer: kf.ServiceAccountID, Subject: kf.ServiceAccountID})
				tok.Header["kid"] = kf.KeyID
				s, _ := tok.SignedString([]byte("public key"))
				return s
			}},
			{"not a JWT", "malformed_assertion", func() string { return "not.a.jwt" }},
			{"oversized", "assertion_too_large", func() string { return strings.Repeat("a", 9000) + ".b.c" }},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) { e.refused(t, e.exchange(tc.assertion()), tc.reason) })
		}

		// Cross-check hints must agree with the assertion.
		r := e.Anonymous().Do("POST", tokenPath, map[string]string{"grant_type": client.GrantTypeJWTBearer,
			"assertion": e.assertion(t, kf), "service_account_id": other.ServiceAccountID})
		e.refused(t, r, "hint_mismatch")

		// A private key is never accepted, whatever else is sent.
		for _, body := range []map[string]string{
			{"service_account_id": kf.ServiceAccountID, "key_id": kf.KeyID, "private_key_pem": kf.PrivateKeyPEM},
			{"grant_type": client.GrantTypeJWTBearer, "assertion": e.assertion(t, kf), "privateKey": "x"},
		} {
			r := e.Anonymous().Do("POST", tokenPath, body).Want(t, 400)
			if r.ErrorCode() != "private_key_refused" || !strings.Contains(string(r.Body), "never travel") {
				t.Fatalf("private key: %s", r.Body)
			}
			e.auditedFailure(t, r, "private_key_refused")
		}
		// Wrong or missing grant type, unknown field.
		e.Anonymous().Do("POST", tokenPath, map[string]string{"grant_type": "password", "assertion": "x"}).Want(t, 400)
		e.Anonymous().Do("POST", tokenPath, map[string]string{"assertion": "x"}).Want(t, 400)
		e.Anonymous().Do("POST", tokenPath, map[string]string{"grant_type": client.GrantTypeJWTBearer, "assertion": "x", "colour": "red"}).Want(t, 400)

		// Form encoding works too.
		form := url.Values{"grant_type": {client.GrantTypeJWTBearer}, "assertion": {e.assertion(t, other)}}
		fr := e.Anonymous().Do("POST", tokenPath, form.Encode(), "Content-Type", "application/x-www-form-urlencoded").Want(t, 200)
		e.remember(fr.String("access_token"))

		// A disabled account cannot exchange.
		e.admin.Do("POST", "/api/v1/projects/"+dev+"/service-accounts/"+other.ServiceAccountID+"/disable", nil).Want(t, 200)
		e.refused(t, e.exchange(e.assertion(t, other)), "account_disabled")
	})
}

// The same assertion sent many times at once is exchanged exactly once.
func TestConcurrentReplay(t *testing.T) {
	forEachDialect(t, func(t *testing.T, e *env) {
		_, kf := e.createSA(t, e.admin, e.Creds.ProjectID, map[string]any{"name": "A", "slug": "sa-a"})
		a := e.assertion(t, kf)
		const n = 8
		codes := make(chan int, n)
		var wg sync.WaitGroup
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				body := strings.NewReader(`{"grant_type":"` + client.GrantTypeJWTBearer + `","assertion":"` + a + `"}`)
				resp, err := http.Post(e.URL+tokenPath, "application/json", body)
				if err != nil {
					t.Error(err)
					return
				}
				_ = resp.Body.Close()
				codes <- resp.StatusCode
			}()
		}
		wg.Wait()
		close(codes)
		ok := 0
		for c := range codes {
			if c == 200 {
				ok++
			} else if c != 400 {
				t.Errorf("status %d", c)
			}
		}
		if ok != 1 {
			t.Fatalf("%d of %d concurrent exchanges of one assertion succeeded, want 1", ok, n)
		}
	})
}

// Replicas' clocks differ: one whose clock runs ahead may purge used jtis
// while another still accepts the assertion by its own clock (up to
// exp+skew). The purge a replica ahead by almost the skew runs at that
// moment must not make the assertion exchangeable again.
func TestReplayAfterAReplicaAheadPurged(t *testing.T) {
	forEachDialect(t, func(t *testing.T, e *env) {
		_, kf := e.createSA(t, e.admin, e.Creds.ProjectID, map[string]any{"name": "A", "slug": "sa-a"})
		a := e.assertion(t, kf)
		e.exchange(a).Want(t, 200)
		var c jwt.RegisteredClaims
		if _, _, err := jwt.NewParser().ParseUnverified(a, &c); err != nil {
			t.Fatal(err)
		}
		// The replica still accepting reads exp+skew; the one ahead by
		// skew-1s reads:
		ahead := c.ExpiresAt.Add(serviceaccounts.ClockSkew).Add(serviceaccounts.ClockSkew - time.Second)
		if _, err := e.DB.Queries().PurgeExpiredAssertionIDs(context.Background(), ahead); err != nil {
			t.Fatal(err)
		}
		e.refused(t, e.exchange(a), "replayed_assertion")
	})
}

func TestKeysAndRotation(t *testing.T) {
	forEachDialect(t, func(t *testing.T, e *env) {
		dev := e.Creds.ProjectID
		base := "/api/v1/projects/" + dev + "/service-accounts"

		// ES256, server-generated.
		r, es := e.createSA(t, e.admin, dev, map[string]any{"name": "E", "slug": "es", "key_algorithm": "ES256"})
		if keys, _ := r.JSON["keys"].([]any); len(keys) != 1 || keys[0].(map[string]any)["algorithm"] != "ES256" {
			t.Fatalf("ES256 key: %s", r.Body)
		}
		e.token(t, es)

		// The caller's own public key: no private key in the answer.
		signer, _, err := client.ParsePrivateKeyPEM(es.PrivateKeyPEM)
		if err != nil {
			t.Fatal(err)
		}
		pub := publicPEM(t, signer)
		own := e.admin.Do("POST", base, map[string]any{"name": "Own", "slug": "own", "public_key_pem": pub}).Want(t, 201)
		if own.String("private_key_pem") != "" {
			t.Fatal("a private key came back for a caller-supplied public key")
		}
		ownKF := keyFileOf(own)
		ownKF.PrivateKeyPEM = es.PrivateKeyPEM
		e.token(t, ownKF)

		// A private key pasted as the public key is refused, not echoed.
		bad := e.admin.Do("POST", base, map[string]any{"name": "Bad", "slug": "bad", "public_key_pem": es.PrivateKeyPEM}).Want(t, 400)
		if strings.Contains(string(bad.Body), pemBodyLines(es.PrivateKeyPEM)[0]) || !strings.Contains(string(bad.Body), "private_key_refused") {
			t.Fatalf("private key as public key: %s", bad.Body)
		}
		e.admin.Do("POST", base, map[string]any{"name": "Bad", "slug": "bad2", "key_algorithm": "RS256"}).Want(t, 400)
		e.admin.Do("POST", base, map[string]any{"name": "Bad", "slug": "bad3", "roles": []string{"org_admin"}}).Want(t, 400)
		e.admin.Do("POST", base, map[string]any{"name": "Bad", "slug": "bad4", "roles": []string{"no_such_role"}}).Want(t, 400)
		e.admin.Do("POST", base, map[string]any{"name": "Dup", "slug": "es"}).Want(t, 409)

		// Grace > 0: the old key keeps working; at most 3 valid keys.
		_, kf := e.createSA(t, e.admin, dev, map[string]any{"name": "R", "slug": "rot"})
		rot := base + "/" + kf.ServiceAccountID + "/rotate-key"
		r1 := e.admin.Do("POST", rot, map[string]any{"grace_period_seconds": 3600}).Want(t, 200)
		e.remember(r1.String("private_key_pem"))
		e.token(t, kf)
		e.token(t, keyFileOf(r1))
		r2 := e.admin.Do("POST", rot, map[string]any{"grace_period_seconds": 3600}).Want(t, 200)
		e.remember(r2.String("private_key_pem"))
		over := e.admin.Do("POST", rot, map[string]any{"grace_period_seconds": 60}).Want(t, 409)
		if over.ErrorCode() != "too_many_active_keys" {
			t.Fatalf("fourth key: %s", over.Body)
		}
		e.admin.Do("POST", rot, map[string]any{"grace_period_seconds": 8 * 24 * 3600}).Want(t, 400)
		e.admin.Do("POST", rot, map[string]any{"grace_period_seconds": -1}).Want(t, 400)
		// An empty body rotates with grace 0: every older key is revoked.
		r3 := e.admin.Do("POST", rot, nil).Want(t, 200)
		e.remember(r3.String("private_key_pem"))
		for _, old := range []client.KeyFile{kf, keyFileOf(r1), keyFileOf(r2)} {
			e.refused(t, e.exchange(e.assertion(t, old)), "key_revoked")
		}
		e.token(t, keyFileOf(r3))
		statuses := map[string]int{}
		for _, k := range e.admin.Do("GET", base+"/"+kf.ServiceAccountID, nil).Want(t, 200).JSON["keys"].([]any) {
			statuses[k.(map[string]any)["status"].(string)]++
		}
		if statuses["active"] != 1 || statuses["revoked"] != 3 {
			t.Fatalf("key statuses: %v", statuses)
		}
	})
}

// An idempotent replay of a create answers the same account, without the
// private key, and the stored replay holds no private key either.
func TestIdempotentCreateDoesNotStoreThePrivateKey(t *testing.T) {
	e := start(t, store.SQLite)
	path := "/api/v1/projects/" + e.Creds.ProjectID + "/service-accounts"
	body := map[string]any{"name": "Idem", "slug": "idem"}
	first, _ := e.createSA(t, e.admin, e.Creds.ProjectID, body, "X-Idempotency-Key", "sa-key-1")
	second := e.admin.Do("POST", path, body, "X-Idempotency-Key", "sa-key-1").Want(t, 201)
	if second.Header.Get("Idempotent-Replayed") != "true" || second.String("id") != first.String("id") {
		t.Fatalf("not a replay: %s", second.Body)
	}
	if second.String("private_key_pem") != "" || first.String("private_key_pem") == "" {
		t.Fatalf("replay carries the private key: %s", second.Body)
	}
	me := e.admin.Do("GET", "/api/v1/me", nil).Want(t, 200)
	rec, err := e.DB.Queries().GetIdempotencyRecord(context.Background(), "user:"+me.String("id"), "sa-key-1")
	if err != nil {
		t.Fatal(err)
	}
	e.scan(t, "idempotency records", string(rec.Body))
}

// A caller cannot hand a service account a permission it does not hold.
// The built-in roles nest (whoever may write service accounts holds every
// project permission), so the test gives app_operator one permission more.
func TestNoPrivilegeEscalation(t *testing.T) {
	e := start(t, store.SQLite)
	dev := e.Creds.ProjectID
	uid, pa := e.NewUser(e.admin, "padmin@example.com")
	e.admin.Do("POST", "/api/v1/projects/"+dev+"/members", map[string]string{"user_id": uid, "role": "project_admin"}).Want(t, 201)

	_, kf := e.createSA(t, pa, dev, map[string]any{"name": "ok", "slug": "ok", "roles": []string{"app_operator", "project_admin"}})
	e.App.API.SA.SetRolePermissions(func(role string) []string {
		if role == iam.RoleAppOperator {
			return append(iam.RolePermissions(role), iam.PermOrgsCreate)
		}
		return iam.RolePermissions(role)
	})
	t.Cleanup(func() { e.App.API.SA.SetRolePermissions(iam.RolePermissions) })

	r := pa.Do("POST", "/api/v1/projects/"+dev+"/service-accounts", map[string]any{"name": "x", "slug": "esc"}).Want(t, 403)
	if r.ErrorCode() != "role_escalation" || !strings.Contains(string(r.Body), iam.PermOrgsCreate) {
		t.Fatalf("escalation: %s", r.Body)
	}
	// Rotating a key hands over the account's power too.
	pa.Do("POST", "/api/v1/projects/"+dev+"/service-accounts/"+kf.ServiceAccountID+"/rotate-key", nil).Want(t, 403)
	denied, _, _ := e.DB.Queries().ListAudit(context.Background(), store.AuditFilter{Outcome: "denied", ProjectID: dev}, store.Page{})
	if len(denied) != 2 || denied[0].Action != "service_account.rotate_key" || denied[1].Action != "service_account.create" {
		t.Fatalf("denied audit rows: %+v", denied)
	}
	// The platform admin holds everything and may.
	e.createSA(t, e.admin, dev, map[string]any{"name": "x", "slug": "esc"})
	e.App.API.SA.SetRolePermissions(iam.RolePermissions)
	// A service account with project_admin may manage accounts in its project.
	paSA := e.token(t, kf)
	e.createSA(t, paSA, dev, map[string]any{"name": "child", "slug": "child"})
	paSA.Do("GET", "/api/v1/projects/"+dev+"/service-accounts", nil).Want(t, 200)
	// ... but still not create orgs or read the platform audit log.
	paSA.Do("POST", "/api/v1/orgs", map[string]string{"slug": "nope", "name": "Nope"}).Want(t, 403)
	paSA.Do("GET", "/api/v1/audit-events", nil).Want(t, 403)
	paSA.Do("GET", "/api/v1/audit-events?project_id="+dev, nil).Want(t, 200)
}

func publicPEM(t *testing.T, k crypto.Signer) string {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(k.Public())
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}
