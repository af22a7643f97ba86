package client_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/client"
)

// testKey is a fresh Ed25519 service-account key.
func testKey(t *testing.T) client.KeyFile {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return client.KeyFile{Type: client.KeyFileType, ServiceAccountID: "sa", KeyID: "key",
		PrivateKeyPEM: string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))}
}

// fakeAPI mints a 60-second token (renewed on every use: the source renews
// a minute early) and answers every other request with redirect(r), or
// with a principal when redirect is nil.
func fakeAPI(t *testing.T, redirect func(r *http.Request) string) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == client.ServiceAccountTokenPath:
			_, _ = w.Write([]byte(`{"access_token":"sa-token","token_type":"Bearer","expires_in":60}`))
		case redirect != nil:
			http.Redirect(w, r, redirect(r), http.StatusTemporaryRedirect)
		default:
			_, _ = w.Write([]byte(`{"id":"sa","type":"service_account"}`))
		}
	}))
	t.Cleanup(s.Close)
	return s
}

// elsewhere records the Authorization header of each request it gets.
func elsewhere(t *testing.T) (*httptest.Server, *atomic.Value) {
	t.Helper()
	var got atomic.Value
	got.Store("")
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store("request:" + r.Header.Get("Authorization"))
		_, _ = w.Write([]byte(`{}`))
	}))
	t.Cleanup(s.Close)
	return s, &got
}

// The documented use: a token source made from c, its transport then
// installed on c. Renewing the token must not go through that transport
// (it would wait on the source's own lock forever).
func TestTokenSourceRenewsOnItsOwnClient(t *testing.T) {
	s := fakeAPI(t, nil)
	c := client.New(s.URL, "")
	ts := client.NewTokenSource(c, testKey(t))
	c.HTTP.Transport = ts.Transport(nil)
	done := make(chan error, 1)
	go func() {
		_, err := c.Me(t.Context())
		if err == nil {
			_, err = c.Me(t.Context()) // a renewal, from a live transport
		}
		done <- err
	}()
	// A deadlock never returns: the guard turns it into a failure, not a
	// hung test binary.
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a request through the token source's transport never returned: the renewal waits on the source's lock")
	}
}

// A client's credentials go to its server's origin only: a redirect to
// another port of the same host (or an http:// downgrade) is refused, as
// net/http alone would forward the Authorization header there.
func TestRedirectToAnotherOriginKeepsTheToken(t *testing.T) {
	other, got := elsewhere(t)
	s := fakeAPI(t, func(r *http.Request) string { return other.URL + r.URL.Path })
	_, err := client.New(s.URL, "person-token").Me(t.Context())
	if err == nil || !strings.Contains(err.Error(), "another origin") {
		t.Fatalf("redirect to %s: err %v", other.URL, err)
	}
	if g := got.Load().(string); g != "" {
		t.Fatalf("the other origin got %q", g)
	}
}

// The token source's transport, on an HTTP client of the caller's own
// (net/http's redirect rules alone), adds the token for its server only:
// a redirect elsewhere arrives without it.
func TestTokenSourceTransportKeepsTheTokenAtHome(t *testing.T) {
	other, got := elsewhere(t)
	// localhost and 127.0.0.1: one machine, two origins.
	away := strings.Replace(other.URL, "127.0.0.1", "localhost", 1)
	for _, target := range []string{other.URL, away} {
		s := fakeAPI(t, func(r *http.Request) string { return target + r.URL.Path })
		c := client.New(s.URL, "")
		c.HTTP = &http.Client{Transport: client.NewTokenSource(client.New(s.URL, ""), testKey(t)).Transport(nil)}
		got.Store("")
		if _, err := c.Me(t.Context()); err != nil {
			t.Fatal(err)
		}
		if g := got.Load().(string); g != "request:" {
			t.Fatalf("redirected to %s: it got %q, want a request without a token", target, g)
		}
	}
}

// A blob upload goes to the API even when the intent's upload_url, which
// the server supplies and the client appends to the base URL, would name
// another host.
func TestUploadStaysOnTheServer(t *testing.T) {
	other, got := elsewhere(t)
	c := client.New("http://127.0.0.1:1", "person-token")
	for _, upload := range []string{"@" + strings.TrimPrefix(other.URL, "http://") + "/upload", ".example.net/upload"} {
		_, err := c.UploadBlob(t.Context(), upload, strings.NewReader("abc"), 3, 0, nil)
		if err == nil || !strings.Contains(err.Error(), "not a path on the API") {
			t.Errorf("upload_url %q: err %v", upload, err)
		}
	}
	if g := got.Load().(string); g != "" {
		t.Fatalf("another host got the upload: %q", g)
	}
}
