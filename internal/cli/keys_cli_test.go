package cli

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/gpuaas/gpuaas/internal/registry"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// tokenKID is the kid header of a JWT, unverified.
func tokenKID(t *testing.T, tok string) string {
	t.Helper()
	head, _, _ := strings.Cut(tok, ".")
	b, err := base64.RawURLEncoding.DecodeString(head)
	if err != nil {
		t.Fatal(err)
	}
	var h struct {
		KID string `json:"kid"`
	}
	if err := json.Unmarshal(b, &h); err != nil {
		t.Fatal(err)
	}
	return h.KID
}

// gpuaas keys against a running server: after a rotate, tokens issued
// before it still work and new ones carry the new kid; after the old key
// is retired and the replica reloads, its tokens get 401, access tokens
// and registry tokens alike. Each change has its audit row; an unknown
// kid, the last key of a purpose and the release key are refused.
func TestKeysRotateRetireAgainstServer(t *testing.T) {
	storetest.EachDialect(t, func(t *testing.T, d store.Dialect) {
		ctx := context.Background()
		s := servertest.Start(t, d)
		db := []string{"--database-url", s.App.Config.DatabaseURL}
		run := func(args ...string) (int, string, string) {
			t.Helper()
			var out, errOut bytes.Buffer
			code := Run(ctx, args, strings.NewReader(""), &out, &errOut)
			return code, out.String(), errOut.String()
		}
		keys := func(args ...string) []signingKeyRow {
			t.Helper()
			code, out, errOut := run(append(append([]string{"keys", "list", "-o", "json"}, db...), args...)...)
			if code != 0 {
				t.Fatalf("keys list: exit %d: %s", code, errOut)
			}
			var v struct{ Items []signingKeyRow }
			if err := json.Unmarshal([]byte(out), &v); err != nil {
				t.Fatal(err)
			}
			return v.Items
		}
		signer := func(purpose string) string {
			t.Helper()
			for _, k := range keys("--purpose", purpose) {
				if k.Signs {
					return k.KID
				}
			}
			t.Fatalf("no %s key signs", purpose)
			return ""
		}
		rotate := func(purpose string) string {
			t.Helper()
			code, out, errOut := run(append([]string{"keys", "rotate", "--purpose", purpose, "--secret-key", s.App.Config.SecretKey, "-o", "json"}, db...)...)
			var k signingKeyRow
			if code != 0 || json.Unmarshal([]byte(out), &k) != nil || !k.Signs {
				t.Fatalf("rotate %s: exit %d, %s %s", purpose, code, out, errOut)
			}
			return k.KID
		}
		retire := func(kid string) (int, string) {
			t.Helper()
			code, _, errOut := run(append([]string{"keys", "retire", kid, "-o", "json"}, db...)...)
			return code, errOut
		}
		registryToken := func() string {
			t.Helper()
			tr, err := s.App.Registry().TokenHandler().Issue(registry.Subject{ID: "keys-test"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			return tr.Token
		}
		registryStatus := func(tok string) int {
			t.Helper()
			req, err := http.NewRequest("GET", s.URL+"/v2/", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+tok)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp.StatusCode
		}

		oldAccess, oldRegistry := signer("access_token"), signer("registry_token")
		before := s.Admin()
		if kid := tokenKID(t, before.Token); kid != oldAccess {
			t.Fatalf("token kid %s, want the signer %s", kid, oldAccess)
		}
		beforeReg := registryToken()
		if got := registryStatus(beforeReg); got != http.StatusOK {
			t.Fatalf("registry token before the rotate: %d", got)
		}

		newAccess, newRegistry := rotate("access_token"), rotate("registry_token")
		if signer("access_token") != newAccess || signer("registry_token") != newRegistry {
			t.Fatal("keys list does not show the rotated keys as the signers")
		}
		s.ReloadSigningKeys()
		before.Do("GET", "/api/v1/me", nil).Want(t, http.StatusOK)
		after := s.Admin()
		if kid := tokenKID(t, after.Token); kid != newAccess {
			t.Fatalf("a token issued after the rotate has kid %s, want %s", kid, newAccess)
		}
		afterReg := registryToken()
		if kid := tokenKID(t, afterReg); kid != newRegistry {
			t.Fatalf("a registry token issued after the rotate has kid %s, want %s", kid, newRegistry)
		}
		if a, b := registryStatus(beforeReg), registryStatus(afterReg); a != http.StatusOK || b != http.StatusOK {
			t.Fatalf("registry tokens after the rotate: old %d, new %d; want both 200", a, b)
		}

		for _, kid := range []string{oldAccess, oldRegistry} {
			if code, errOut := retire(kid); code != 0 {
				t.Fatalf("retire %s: exit %d: %s", kid, code, errOut)
			}
		}
		s.ReloadSigningKeys()
		if r := before.Do("GET", "/api/v1/me", nil); r.Status != http.StatusUnauthorized {
			t.Fatalf("a token of the retired key: %d, want 401", r.Status)
		}
		after.Do("GET", "/api/v1/me", nil).Want(t, http.StatusOK)
		if a, b := registryStatus(beforeReg), registryStatus(afterReg); a != http.StatusUnauthorized || b != http.StatusOK {
			t.Fatalf("registry tokens after the retire: old %d, new %d; want 401, 200", a, b)
		}

		for _, c := range []struct {
			args []string
			want string
		}{
			{[]string{"keys", "retire", "no-such-kid"}, "no signing key has the kid no-such-kid"},
			{[]string{"keys", "retire", newAccess}, "rotate --purpose access_token first"},
			{[]string{"keys", "retire", oldAccess}, "already retired"},
			{[]string{"keys", "rotate", "--purpose", "release_signing", "--secret-key", s.App.Config.SecretKey}, "clients pin its public key"},
		} {
			if code, _, errOut := run(append(c.args, db...)...); code != 1 || !strings.Contains(errOut, c.want) {
				t.Errorf("%v: exit %d, %q; want 1 and %q", c.args, code, errOut, c.want)
			}
		}
		release := keys("--purpose", "release_signing")
		if len(release) != 1 || !release[0].Signs {
			t.Fatalf("release keys listed as %+v, want the one that signs releases", release)
		}
		if code, errOut := retire(release[0].KID); code != 1 || !strings.Contains(errOut, "clients pin its public key") {
			t.Errorf("retire the release key: exit %d, %q", code, errOut)
		}
		if code, _, errOut := run(append([]string{"keys", "rotate", "--purpose", "access_token", "--secret-key", base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{9}, 32))}, db...)...); code != 1 || !strings.Contains(errOut, "does not open") {
			t.Errorf("rotate under another master key: exit %d, %q", code, errOut)
		}

		for action, want := range map[string]int{"signing_key.rotate": 2, "signing_key.retire": 2} {
			rows, _, err := s.DB.Queries().ListAudit(ctx, store.AuditFilter{Action: action}, store.Page{})
			if err != nil || len(rows) != want {
				t.Errorf("%s audit rows %d, err %v; want %d", action, len(rows), err, want)
			}
		}
		if got := len(keys()); got != 5 {
			t.Errorf("keys list shows %d keys, want 5 (two of each token purpose and the release key)", got)
		}
	})
}

// Over two replicas on one database: after a rotate and a retire of the
// old key, each replica refuses a token of the retired key once its own
// periodic reload has run, whichever replica issued it.
func TestKeysRetireReachesEveryReplica(t *testing.T) {
	ctx := context.Background()
	a, b := servertest.TwoReplicas(t)
	db := []string{"--database-url", a.App.Config.DatabaseURL}
	run := func(args ...string) {
		t.Helper()
		var out, errOut bytes.Buffer
		if code := Run(ctx, append(args, db...), strings.NewReader(""), &out, &errOut); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut.String())
		}
	}
	old := b.Admin() // signed in on b, used on both
	oldKID := tokenKID(t, old.Token)
	a.As(old.Token).Do("GET", "/api/v1/me", nil).Want(t, http.StatusOK)
	run("keys", "rotate", "--purpose", "access_token", "--secret-key", a.App.Config.SecretKey)
	a.ReloadSigningKeys()
	b.ReloadSigningKeys()
	fresh := a.Login(b.Creds.AdminEmail, b.Creds.AdminPassword)
	if tokenKID(t, fresh.Token) == oldKID {
		t.Fatal("replica a still signs with the old key after its reload")
	}
	run("keys", "retire", oldKID)
	a.ReloadSigningKeys()
	if r := a.As(old.Token).Do("GET", "/api/v1/me", nil); r.Status != http.StatusUnauthorized {
		t.Fatalf("replica a after its reload: %d, want 401", r.Status)
	}
	b.ReloadSigningKeys()
	for name, s := range map[string]*servertest.Server{"a": a, "b": b} {
		if r := s.As(old.Token).Do("GET", "/api/v1/me", nil); r.Status != http.StatusUnauthorized {
			t.Fatalf("replica %s: a token of the retired key gets %d, want 401", name, r.Status)
		}
		s.As(fresh.Token).Do("GET", "/api/v1/me", nil).Want(t, http.StatusOK)
	}
}

// A rotate on a database no server has started on yet has no key to check
// the master key against, and refuses: a first key sealed under a key the
// servers do not have would keep every one of them from starting.
func TestKeysRotateRefusesADatabaseWithoutKeys(t *testing.T) {
	ctx := context.Background()
	url := storetest.URL(t, store.SQLite)
	db, err := store.Open(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	_ = db.Close()
	var out, errOut bytes.Buffer
	code := Run(ctx, []string{"keys", "rotate", "--purpose", "access_token", "--database-url", url,
		"--secret-key", base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{9}, 32))}, strings.NewReader(""), &out, &errOut)
	if code != 1 || !strings.Contains(errOut.String(), "start a server on this database first") {
		t.Fatalf("exit %d, stderr %q", code, errOut.String())
	}
}
