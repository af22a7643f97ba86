package registry

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/gpuaas/gpuaas/internal/errdefs"
)

const (
	appRepo   = "gpuaas/apps/p1/app"
	otherRepo = "gpuaas/apps/p2/other"
)

// isDenied reports whether err is the registry (or token endpoint)
// refusing access.
func isDenied(err error) bool {
	var terr *transport.Error
	if !errors.As(err, &terr) {
		return false
	}
	return terr.StatusCode == http.StatusUnauthorized || terr.StatusCode == http.StatusForbidden
}

func TestPushPullAndManifestExists(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, nil)
	env.authz.add("publisher", "s3cret", appRepo, ActionPush, ActionPull)
	ctx := context.Background()
	auth := &authn.Basic{Username: "publisher", Password: "s3cret"}
	img := ociImage(t, 64<<10)
	ref := env.ref(t, appRepo)

	if err := remote.Write(ref, img, env.opts(ctx, auth)...); err != nil {
		t.Fatalf("push to the granted repository: %v", err)
	}
	want, _ := img.Digest()
	pulled, err := remote.Image(ref, env.opts(ctx, auth)...)
	if err != nil {
		t.Fatalf("pull: %v", err)
	}
	if got, _ := pulled.Digest(); got != want {
		t.Fatalf("pulled digest %s, pushed %s", got, want)
	}
	layers, _ := pulled.Layers()
	for _, l := range layers {
		rc, err := l.Compressed()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, rc); err != nil {
			t.Fatalf("read layer: %v", err)
		}
		rc.Close()
	}

	raw, _ := img.RawManifest()
	mt, size, err := env.reg.ManifestExists(ctx, appRepo, want.String())
	if err != nil {
		t.Fatalf("ManifestExists: %v", err)
	}
	if mt != string(types.OCIManifestSchema1) || size != int64(len(raw)) {
		t.Fatalf("ManifestExists = %q, %d; want %q, %d", mt, size, types.OCIManifestSchema1, len(raw))
	}
	_, _, err = env.reg.ManifestExists(ctx, appRepo, "sha256:"+strings.Repeat("ab", 32))
	if !errors.Is(err, ErrNotFound) || errdefs.KindOf(err) != errdefs.KindNotFound {
		t.Fatalf("ManifestExists(random digest) err = %v, want ErrNotFound of kind NotFound", err)
	}
	_, _, err = env.reg.ManifestExists(ctx, otherRepo, want.String())
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("ManifestExists(other repo) err = %v, want ErrNotFound", err)
	}
	for _, tc := range []struct{ repo, digest string }{
		{appRepo, "sha256:nothex"},
		{appRepo, "latest"},
		{"UPPER/case", want.String()},
		{"../etc", want.String()},
	} {
		if _, _, err := env.reg.ManifestExists(ctx, tc.repo, tc.digest); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("ManifestExists(%q, %q) err = %v, want ErrInvalidArgument", tc.repo, tc.digest, err)
		}
	}

	// Deletion is enabled and needs the "delete" action.
	env.authz.add("publisher", "s3cret", appRepo, ActionPush, ActionPull, ActionDelete)
	if err := remote.Delete(ref.Context().Digest(want.String()), env.opts(ctx, auth)...); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, _, err := env.reg.ManifestExists(ctx, appRepo, want.String()); !errors.Is(err, ErrNotFound) {
		t.Fatalf("ManifestExists after delete err = %v, want ErrNotFound", err)
	}
}

func TestAccessRefused(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, nil)
	env.authz.add("publisher", "s3cret", appRepo, ActionPush, ActionPull)
	env.authz.add("reader", "r", otherRepo, ActionPull)
	ctx := context.Background()
	publisher := &authn.Basic{Username: "publisher", Password: "s3cret"}
	if err := remote.Write(env.ref(t, appRepo), ociImage(t, 1024), env.opts(ctx, publisher)...); err != nil {
		t.Fatalf("push: %v", err)
	}

	t.Run("push to another repository", func(t *testing.T) {
		err := remote.Write(env.ref(t, otherRepo), ociImage(t, 1024), env.opts(ctx, publisher)...)
		if !isDenied(err) {
			t.Fatalf("push to ungranted repo: err = %v, want 401/403", err)
		}
	})
	t.Run("pull of another repository", func(t *testing.T) {
		reader := &authn.Basic{Username: "reader", Password: "r"}
		_, err := remote.Image(env.ref(t, appRepo), env.opts(ctx, reader)...)
		if !isDenied(err) {
			t.Fatalf("pull of ungranted repo: err = %v, want 401/403", err)
		}
	})
	t.Run("push with a pull-only grant", func(t *testing.T) {
		reader := &authn.Basic{Username: "reader", Password: "r"}
		err := remote.Write(env.ref(t, otherRepo), ociImage(t, 1024), env.opts(ctx, reader)...)
		if !isDenied(err) {
			t.Fatalf("push with pull grant: err = %v, want 401/403", err)
		}
	})
	t.Run("anonymous pull", func(t *testing.T) {
		_, err := remote.Image(env.ref(t, appRepo), env.opts(ctx, authn.Anonymous)...)
		if !isDenied(err) {
			t.Fatalf("anonymous pull: err = %v, want 401/403", err)
		}
		status, body := env.token(t, "", "", url.Values{"scope": {"repository:" + appRepo + ":pull"}})
		if status != http.StatusUnauthorized || body["error"] == nil || body["errors"] == nil {
			t.Fatalf("anonymous token request = %d %v, want 401 with an error body", status, body)
		}
		if status, _ := env.bearerStatus(t, http.MethodGet, "/v2/"+appRepo+"/tags/list", ""); status != http.StatusUnauthorized {
			t.Fatalf("registry without token = %d, want 401", status)
		}
	})
	t.Run("bad password", func(t *testing.T) {
		_, err := remote.Image(env.ref(t, appRepo), env.opts(ctx, &authn.Basic{Username: "publisher", Password: "nope"})...)
		if !isDenied(err) {
			t.Fatalf("bad password pull: err = %v, want 401/403", err)
		}
	})
}

func TestExpiredTokenRefused(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, func(c *Config) { c.TokenTTL = time.Minute })
	env.authz.add("publisher", "s3cret", appRepo, ActionPush, ActionPull)
	q := url.Values{"service": {env.host}, "scope": {"repository:" + appRepo + ":pull"}}

	status, body := env.token(t, "publisher", "s3cret", q)
	if status != http.StatusOK {
		t.Fatalf("token: %d %v", status, body)
	}
	if got, _ := env.bearerStatus(t, http.MethodGet, "/v2/", body["token"].(string)); got != http.StatusOK {
		t.Fatalf("fresh token on /v2/ = %d, want 200", got)
	}

	// Issue a token whose expiry (plus distribution's 60 s leeway) is in the past.
	env.clock.set(-3 * time.Minute)
	status, body = env.token(t, "publisher", "s3cret", q)
	env.clock.set(0)
	if status != http.StatusOK {
		t.Fatalf("token: %d %v", status, body)
	}
	got, hdr := env.bearerStatus(t, http.MethodGet, "/v2/"+appRepo+"/tags/list", body["token"].(string))
	if got != http.StatusUnauthorized || !strings.Contains(hdr.Get("WWW-Authenticate"), `error="invalid_token"`) {
		t.Fatalf("expired token = %d %q, want 401 invalid_token", got, hdr.Get("WWW-Authenticate"))
	}
}

// A token never outlives the credentials it was issued for: a publish
// credential that expires in a few seconds must not push for the next
// TokenTTL minutes.
func TestTokenExpiresWithItsSubject(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, nil) // TokenTTL: 5 minutes
	env.authz.add("publisher", "s3cret", appRepo, ActionPush, ActionPull)
	q := url.Values{"service": {env.host}, "scope": {"repository:" + appRepo + ":push,pull"}}

	expires := env.clock.Now().Add(20 * time.Second)
	env.authz.expire("publisher", expires)
	status, body := env.token(t, "publisher", "s3cret", q)
	if status != http.StatusOK {
		t.Fatalf("token: %d %v", status, body)
	}
	c := env.claims(t, body["token"].(string))
	if c.ExpiresAt.After(expires) || body["expires_in"].(float64) > 20 {
		t.Fatalf("token expires at %s (expires_in %v), after its credentials (%s)", c.ExpiresAt, body["expires_in"], expires)
	}

	// Credentials that expired three minutes ago (the Authorizer issued
	// the subject then): the registry refuses the token, leeway included.
	env.clock.set(-3 * time.Minute)
	env.authz.expire("publisher", env.clock.Now().Add(10*time.Second))
	status, body = env.token(t, "publisher", "s3cret", q)
	env.clock.set(0)
	if status != http.StatusOK {
		t.Fatalf("token: %d %v", status, body)
	}
	if got, _ := env.bearerStatus(t, http.MethodGet, "/v2/"+appRepo+"/tags/list", body["token"].(string)); got != http.StatusUnauthorized {
		t.Fatalf("token of credentials expired 3 minutes ago = %d, want 401", got)
	}

	// A subject already expired gets no token at all.
	env.authz.expire("publisher", env.clock.Now().Add(-time.Second))
	if status, body := env.token(t, "publisher", "s3cret", q); status != http.StatusUnauthorized {
		t.Fatalf("token for an expired subject = %d %v, want 401", status, body)
	}
}

func TestTokenEndpoint(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, nil)
	env.authz.add("ci", "pw", "gpuaas/apps/p1/a", ActionPull)
	env.authz.add("ci", "pw", "gpuaas/apps/p1/b", ActionPush, ActionPull, ActionDelete)
	env.authz.add("ci", "pw", "gpuaas/apps/p1/star", ActionAll)

	t.Run("intersection", func(t *testing.T) {
		status, body := env.token(t, "ci", "pw", url.Values{"service": {env.host}, "scope": {"repository:gpuaas/apps/p1/a:push,pull"}})
		if status != http.StatusOK {
			t.Fatalf("%d %v", status, body)
		}
		if body["token"] != body["access_token"] || body["expires_in"].(float64) != 300 || body["issued_at"] == "" {
			t.Fatalf("response fields: %v", body)
		}
		c := env.claims(t, body["token"].(string))
		if c.Subject != "ci" || len(c.Access) != 1 || c.Access[0].String() != "repository:gpuaas/apps/p1/a:pull" {
			t.Fatalf("claims = %+v, want only pull on a", c)
		}
		if got := c.ExpiresAt.Sub(c.IssuedAt.Time); got != DefaultTokenTTL {
			t.Fatalf("ttl = %s", got)
		}
	})
	t.Run("several scopes", func(t *testing.T) {
		q := url.Values{
			"service":       {env.host},
			"offline_token": {"true"},
			"client_id":     {"docker"},
			"scope": {
				"repository:gpuaas/apps/p1/a:pull",
				"repository:gpuaas/apps/p1/b:push repository:gpuaas/apps/p1/b:pull,delete repository:gpuaas/apps/p9/x:pull",
				"registry:catalog:* repository:gpuaas/apps/p1/star:pull,push",
			},
		}
		status, body := env.token(t, "ci", "pw", q)
		if status != http.StatusOK {
			t.Fatalf("%d %v", status, body)
		}
		if _, ok := body["refresh_token"]; ok {
			t.Fatalf("refresh_token issued: %v", body)
		}
		var got []string
		for _, s := range env.claims(t, body["token"].(string)).Access {
			got = append(got, s.String())
		}
		want := []string{
			"repository:gpuaas/apps/p1/a:pull",
			"repository:gpuaas/apps/p1/b:delete,pull,push",
			"repository:gpuaas/apps/p1/star:pull,push",
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Fatalf("granted %v, want %v", got, want)
		}
	})
	t.Run("no scope", func(t *testing.T) {
		status, body := env.token(t, "ci", "pw", url.Values{})
		if status != http.StatusOK {
			t.Fatalf("%d %v", status, body)
		}
		if a := env.claims(t, body["token"].(string)).Access; len(a) != 0 {
			t.Fatalf("access = %v, want none", a)
		}
	})
	t.Run("errors", func(t *testing.T) {
		for _, tc := range []struct {
			name, user, pass string
			q                url.Values
			want             int
		}{
			{"bad password", "ci", "x", url.Values{}, http.StatusUnauthorized},
			{"unknown user", "nobody", "pw", url.Values{}, http.StatusUnauthorized},
			{"malformed scope", "ci", "pw", url.Values{"scope": {"repository:gpuaas/apps/p1/a"}}, http.StatusBadRequest},
			{"bad repository", "ci", "pw", url.Values{"scope": {"repository:Bad//name:pull"}}, http.StatusBadRequest},
			{"other service", "ci", "pw", url.Values{"service": {"evil.example"}}, http.StatusBadRequest},
		} {
			status, body := env.token(t, tc.user, tc.pass, tc.q)
			errBody, _ := body["error"].(map[string]any)
			if status != tc.want || errBody["code"] == "" || errBody["correlation_id"] == "" {
				t.Errorf("%s: %d %v, want %d with an error envelope", tc.name, status, body, tc.want)
			}
		}
	})
	t.Run("oauth password grant", func(t *testing.T) {
		form := url.Values{
			"grant_type": {"password"}, "username": {"ci"}, "password": {"pw"},
			"service": {env.host}, "scope": {"repository:gpuaas/apps/p1/a:pull"}, "client_id": {"containerd"},
		}
		resp, err := env.srv.Client().PostForm(env.srv.URL+TokenPath, form)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("POST password grant = %d", resp.StatusCode)
		}
		form.Set("password", "wrong")
		resp, err = env.srv.Client().PostForm(env.srv.URL+TokenPath, form)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("POST wrong password = %d", resp.StatusCode)
		}
	})
}

// TestKeyRotation: a registry trusts its signing key and the retired keys
// of its key set, and nothing else.
func TestKeyRotation(t *testing.T) {
	t.Parallel()
	oldKey, err := GenerateSigningKey(ES256)
	if err != nil {
		t.Fatal(err)
	}
	newKey, err := GenerateSigningKey(EdDSA)
	if err != nil {
		t.Fatal(err)
	}
	strangerKey, _ := GenerateSigningKey(EdDSA)
	keys, err := NewKeySet(newKey, oldKey.Public())
	if err != nil {
		t.Fatal(err)
	}
	env := newTestEnv(t, func(c *Config) { c.Keys = keys })
	cfg := Config{Host: env.host, Service: env.host}
	for _, tc := range []struct {
		name string
		key  *SigningKey
		want int
	}{
		{"current", newKey, http.StatusOK},
		{"retired", oldKey, http.StatusOK},
		{"stranger", strangerKey, http.StatusUnauthorized},
	} {
		ks, _ := NewKeySet(tc.key)
		th, err := NewTokenHandler(cfg, ks, env.authz, nil)
		if err != nil {
			t.Fatal(err)
		}
		tok, err := th.Issue(Subject{ID: "x"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := env.bearerStatus(t, http.MethodGet, "/v2/", tok.Token); got != tc.want {
			t.Errorf("%s key: /v2/ = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestTwoInstances: two registries in one process keep their own storage
// and keys.
func TestTwoInstances(t *testing.T) {
	t.Parallel()
	a := newTestEnv(t, nil)
	b := newTestEnv(t, nil)
	a.authz.add("u", "p", appRepo, ActionPush, ActionPull)
	ctx := context.Background()
	img := ociImage(t, 2048)
	if err := remote.Write(a.ref(t, appRepo), img, a.opts(ctx, &authn.Basic{Username: "u", Password: "p"})...); err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	if _, _, err := b.reg.ManifestExists(ctx, appRepo, d.String()); !errors.Is(err, ErrNotFound) {
		t.Fatalf("b sees a's manifest: %v", err)
	}
	tok, _ := a.reg.TokenHandler().Issue(Subject{ID: "u"}, nil)
	if got, _ := b.bearerStatus(t, http.MethodGet, "/v2/", tok.Token); got != http.StatusUnauthorized {
		t.Fatalf("b accepted a's token: %d", got)
	}
}

// TestExternalMode: an external-mode Registry (token endpoint + HTTP
// client only) against a distribution registry that trusts its keys.
func TestExternalMode(t *testing.T) {
	t.Parallel()
	key, _ := GenerateSigningKey(EdDSA)
	keys, _ := NewKeySet(key)
	backend := newTestEnv(t, func(c *Config) { c.Keys = keys })
	backend.authz.add("u", "p", appRepo, ActionPush, ActionPull)
	ctx := context.Background()
	img := ociImage(t, 2048)
	if err := remote.Write(backend.ref(t, appRepo), img, backend.opts(ctx, &authn.Basic{Username: "u", Password: "p"})...); err != nil {
		t.Fatal(err)
	}
	ext, err := New(ctx, Config{
		Host:        "cp.example:443",
		ExternalURL: backend.srv.URL,
		Keys:        keys,
	}, newTestAuthz(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ext.Close()
	d, _ := img.Digest()
	mt, _, err := ext.ManifestExists(ctx, appRepo, d.String())
	if err != nil || mt != string(types.OCIManifestSchema1) {
		t.Fatalf("external ManifestExists = %q, %v", mt, err)
	}
	if _, _, err := ext.ManifestExists(ctx, appRepo, "sha256:"+strings.Repeat("0", 64)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("external ManifestExists(random) = %v", err)
	}
	jwks, err := ext.JWKS()
	if err != nil || !strings.Contains(string(jwks), key.KeyID()) {
		t.Fatalf("JWKS = %s, %v", jwks, err)
	}
	if http.DefaultTransport != nil {
		http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	ok := Config{RootDir: "/tmp/x", Host: "reg.example:5000"}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	if c := ok.withDefaults(); c.Realm != "https://reg.example:5000/v2/token" || c.Service != "reg.example:5000" || c.Issuer != "gpuaas" || c.TokenTTL != 5*time.Minute {
		t.Fatalf("defaults: %+v", c)
	}
	for name, c := range map[string]Config{
		"no host":          {RootDir: "/x"},
		"host with scheme": {RootDir: "/x", Host: "https://reg"},
		"no root":          {Host: "reg"},
		"bad realm":        {RootDir: "/x", Host: "reg", Realm: "ftp://reg/token"},
		"negative ttl":     {RootDir: "/x", Host: "reg", TokenTTL: -time.Second},
		"huge ttl":         {RootDir: "/x", Host: "reg", TokenTTL: 48 * time.Hour},
		"bad external":     {Host: "reg", ExternalURL: "reg.example"},
	} {
		if err := c.Validate(); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: Validate = %v, want ErrInvalidArgument", name, err)
		}
	}
}
