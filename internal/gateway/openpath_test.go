package gateway

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/gpuaas/gpuaas/internal/instances"
)

// TestGatewayOpenPathIsTheGatewaysHoweverSpelt: the code's redemption is
// the gateway's on both listeners, whatever escapes its path is spelt
// with, and with an app token in hand too: a code never reaches the app.
func TestGatewayOpenPathIsTheGatewaysHoweverSpelt(t *testing.T) {
	onBothListeners(t, testOpenPathIsTheGatewaysHoweverSpelt)
}

func testOpenPathIsTheGatewaysHoweverSpelt(t *testing.T, apps bool) {
	up := echoUpstream(t)
	r := newRigOn(t, apps, up.Listener.Addr().String())
	app := r.open(t)
	for i, path := range []string{"/%5F_gpuaas/open", "/__gpuaas%2Fopen", "/%5f%5fgpuaas/%6Fpen"} {
		code := "spelt-" + string(rune('a'+i))
		r.backend.mu.Lock()
		r.backend.codes[code] = instances.UIGrant{UserID: "u", InstanceID: inst, Port: 8080}
		r.backend.mu.Unlock()
		req, _ := http.NewRequest("GET", "http://"+inst+".apps.test:8080"+path+"?code="+code+"&path=%2Fui%2F", nil)
		req.AddCookie(app)
		resp, err := r.client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ui/" || len(resp.Cookies()) != 1 {
			t.Errorf("%s: %d → %q, want the code redeemed (303 → /ui/ with a fresh cookie)", path, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
}

// FuzzGatewayPath: every request URI whose path net/http reads as under
// /__gpuaas/ is left by the apps listener to the gateway (gatewayPath).
func FuzzGatewayPath(f *testing.F) {
	for _, s := range []string{"/__gpuaas/open?code=x", "/%5F_gpuaas/open", "/__gpuaas%2fopen", "/ui/?a=/__gpuaas/", "/%zz", "/%5f%5Fgpuaas%2F"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, uri string) {
		u, err := url.ParseRequestURI(uri)
		if err != nil || !strings.HasPrefix(uri, "/") {
			return
		}
		if strings.HasPrefix(u.Path, "/__gpuaas/") && !gatewayPath([]byte(uri)) {
			t.Fatalf("%q is %q to net/http, and the apps listener would proxy it", uri, u.Path)
		}
	})
}
