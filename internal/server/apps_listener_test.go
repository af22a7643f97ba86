package server_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/gpuaas/gpuaas/internal/config"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
)

// --apps-listen: the server answers app origins on a listener of its own,
// which the gateway's refusals reach as on the console's, and stops it
// with the rest (servertest fails a server that stops with an error).
func TestAppsListener(t *testing.T) {
	s := servertest.Start(t, store.SQLite, func(c *config.Config) {
		c.AppsDomain, c.AppsListen = "apps.localhost", "127.0.0.1:0"
	})
	addr := s.App.AppsAddr()
	if addr == "" {
		t.Fatal("no apps listener")
	}
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, n, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, n, addr)
	}}}
	get := func(host string) (int, string) {
		t.Helper()
		resp, err := hc.Get("http://" + host + "/")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("0193aaaa-bbbb-7ccc-8ddd-eeeeffff0000.apps.localhost"); code != http.StatusUnauthorized {
		t.Errorf("an app origin without a token: %d %s", code, body)
	}
	if code, body := get("127.0.0.1"); code != http.StatusNotFound || !strings.Contains(body, "app UIs only") {
		t.Errorf("the console's host on the apps listener: %d %s", code, body)
	}
	// The console's listener is not the apps listener.
	if strings.HasSuffix(s.URL, ":"+strings.Split(addr, ":")[1]) {
		t.Errorf("the apps listener shares the console's port: %s, %s", s.URL, addr)
	}
}
