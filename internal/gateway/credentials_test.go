package gateway

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// TestGatewayDropsEveryPlatformAuthorization: a platform token never
// reaches the app, whichever of several Authorization headers holds it and
// however many blanks come before it; the app's own key beside it goes on.
func TestGatewayDropsEveryPlatformAuthorization(t *testing.T) {
	onBothListeners(t, testDropsEveryPlatformAuthorization)
}

func testDropsEveryPlatformAuthorization(t *testing.T, apps bool) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, strings.Join(r.Header.Values("Authorization"), " | "))
	}))
	t.Cleanup(up.Close)
	r := newRigOn(t, apps, up.Listener.Addr().String())
	app := r.open(t)
	for _, tc := range []struct {
		sent []string
		want string
	}{
		{[]string{"Bearer sk-own-key", "Bearer platform.jwt"}, "Bearer sk-own-key"},
		{[]string{"Bearer platform.jwt", "Bearer sk-own-key"}, "Bearer sk-own-key"},
		{[]string{"Bearer  platform.jwt"}, ""},
		{[]string{"bearer\tplatform.jwt"}, ""},
		{[]string{"Bearer sk-own-key"}, "Bearer sk-own-key"},
	} {
		req, _ := http.NewRequest("GET", "http://"+inst+".apps.test:8080/ui/x", nil)
		req.Header.Set("Cookie", "__Host-gpuaas_app="+app.Value)
		req.Header["Authorization"] = tc.sent
		resp, err := r.client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(body) != tc.want {
			t.Errorf("Authorization %q: %d, the app saw %q; want %q", tc.sent, resp.StatusCode, body, tc.want)
		}
	}
}

// TestGatewaySaysWhereARequestCameFrom: an app may trust what a proxy says
// of where a request came from (a framework's proxy-headers setting), so
// none of what a browser sends of it reaches the app, whatever the
// X-Forwarded- header's name; the gateway's own For, Host and Proto do.
func TestGatewaySaysWhereARequestCameFrom(t *testing.T) {
	onBothListeners(t, testSaysWhereARequestCameFrom)
}

func testSaysWhereARequestCameFrom(t *testing.T, apps bool) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var seen []string
		for k, v := range r.Header {
			seen = append(seen, k+": "+strings.Join(v, ", "))
		}
		io.WriteString(w, strings.Join(seen, "\n"))
	}))
	t.Cleanup(up.Close)
	r := newRigOn(t, apps, up.Listener.Addr().String())
	app := r.open(t)
	req, _ := http.NewRequest("GET", "http://"+inst+".apps.test:8080/ui/x", nil)
	req.Header.Set("Cookie", "__Host-gpuaas_app="+app.Value)
	for _, h := range []string{"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "X-Forwarded-Port",
		"X-Forwarded-Ssl", "X-Forwarded-Scheme", "X-Forwarded-Prefix", "X-Forwarded-Server", "X-Real-Ip", "Forwarded"} {
		req.Header[h] = []string{"spoofed"}
	}
	req.Header["x-forwarded-port"] = []string{"spoofed"} // as a browser may spell it
	resp, err := r.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("proxied: %d", resp.StatusCode)
	}
	if strings.Contains(string(body), "spoofed") {
		t.Errorf("what the browser said of where it came from reached the app:\n%s", body)
	}
	for _, want := range []string{"X-Forwarded-For: 127.0.0.1", "X-Forwarded-Host: " + inst + ".apps.test:8080", "X-Forwarded-Proto: http"} {
		if !strings.Contains(string(body), want+"\n") && !strings.HasSuffix(string(body), want) {
			t.Errorf("the app did not get %q:\n%s", want, body)
		}
	}
}

// TestGatewayTokenIsForOnePort: an app token is for the UI port its code
// was for. Once the instance serves its UI on another (an upgrade moved
// it), the token opens nothing: a page load goes through the console for
// a fresh code, anything else gets 401, and nothing reaches the app.
func TestGatewayTokenIsForOnePort(t *testing.T) { onBothListeners(t, testTokenIsForOnePort) }

func testTokenIsForOnePort(t *testing.T, apps bool) {
	addr, reached := countingApp(t)
	r := newRigOn(t, apps, addr)
	app := r.open(t)
	do := func(accept string) *http.Response { t.Helper(); return r.appGet(t, "/ui/x", app.Value, accept) }
	if resp := do("*/*"); resp.StatusCode != http.StatusOK || reached.Load() != 1 {
		t.Fatalf("on its port: %d", resp.StatusCode)
	}
	r.backend.mu.Lock()
	moved := r.backend.up[inst]
	moved.ContainerPort = 9090
	r.backend.up[inst] = moved
	r.backend.mu.Unlock()
	r.gw.mu.Lock()
	clear(r.gw.cache) // as upstreamCacheTTL would, later
	r.gw.mu.Unlock()
	if resp := do("*/*"); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("another port, an API call: %d, want 401", resp.StatusCode)
	}
	if resp := do("text/html"); resp.StatusCode != http.StatusSeeOther ||
		resp.Header.Get("Location") != "http://console.test:8080/workloads/instance/"+inst+"/open?path=%2Fui%2Fx" {
		t.Errorf("another port, a page load: %d → %q, want the console", resp.StatusCode, resp.Header.Get("Location"))
	}
	if n := reached.Load(); n != 1 {
		t.Errorf("a token for port 8080 reached the UI on 9090 (%d requests)", n-1)
	}
}

// TestGatewayRefusesAnotherOriginsPost: every instance's origin is the
// same site as every other (and as the console), so SameSite=Lax sends
// the app cookie with a form another tenant's app posts to this one. A
// request that may change something, sent by another origin's page, never
// reaches the app; the app's own pages, and clients that are no browser,
// go on.
func TestGatewayRefusesAnotherOriginsPost(t *testing.T) {
	onBothListeners(t, testRefusesAnotherOriginsPost)
}

func testRefusesAnotherOriginsPost(t *testing.T, apps bool) {
	addr, reached := countingApp(t)
	r := newRigOn(t, apps, addr)
	app := r.open(t)
	own := "http://" + inst + ".apps.test:8080"
	sibling := "http://0193aaaa-bbbb-7ccc-8ddd-000000000001.apps.test:8080"
	for _, tc := range []struct {
		name, method, site, origin string
		refused                    bool
	}{
		{"another instance's form", "POST", "same-site", sibling, true},
		{"another site's form", "POST", "cross-site", "http://evil.example", true},
		{"another instance's DELETE", "DELETE", "same-site", sibling, true},
		{"a browser without fetch metadata, another origin", "POST", "", sibling, true},
		{"a browser without fetch metadata, an opaque origin", "POST", "", "null", true},
		{"the origin's own page", "POST", "same-origin", own, false},
		{"the origin's own page, without fetch metadata", "POST", "", strings.ToUpper(own[:4]) + own[4:], false},
		{"no browser", "POST", "", "", false},
		{"another instance's link (a GET)", "GET", "same-site", sibling, false},
	} {
		before := reached.Load()
		req, _ := http.NewRequest(tc.method, own+"/ui/save", strings.NewReader("a=1"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Cookie", "__Host-gpuaas_app="+app.Value)
		if tc.site != "" {
			req.Header.Set("Sec-Fetch-Site", tc.site)
		}
		if tc.origin != "" {
			req.Header.Set("Origin", tc.origin)
		}
		resp, err := r.client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		sent := reached.Load() > before
		if tc.refused {
			if resp.StatusCode != http.StatusForbidden || sent || !strings.Contains(string(body), "another site") {
				t.Errorf("%s: %d, reached the app: %v; want a 403 page and nothing sent on (%s)", tc.name, resp.StatusCode, sent, body)
			}
			continue
		}
		if resp.StatusCode != http.StatusOK || !sent {
			t.Errorf("%s: %d, reached the app: %v; want it sent on", tc.name, resp.StatusCode, sent)
		}
	}
}

// countingApp is an app that answers "done" to every request, and counts
// them.
func countingApp(t *testing.T) (addr string, reached *atomic.Int64) {
	reached = &atomic.Int64{}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		io.WriteString(w, "done")
	}))
	t.Cleanup(up.Close)
	return up.Listener.Addr().String(), reached
}
