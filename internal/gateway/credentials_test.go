package gateway

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/gpuaas/gpuaas/internal/instances"
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
// X-Forwarded- header's name and however it is spelt: a CGI, FastCGI or
// WSGI server reads X_Forwarded_For as X-Forwarded-For (both are
// HTTP_X_FORWARDED_FOR) and joins their values. The gateway's own For,
// Host and Proto do reach it, and so does an app's own header with an
// underscore in its name.
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
	for _, h := range []string{"X_Forwarded_For", "X_Forwarded_Host", "X_Forwarded_Proto", "X_Forwarded_Prefix",
		"X_Real_Ip", "X-Forwarded_Host", "X_Forwarded-Port", "x_forwarded_for", "x_real_ip", "X-REAL_IP"} {
		req.Header[h] = []string{"spoofed"} // as sent, not canonicalised
	}
	req.Header["X_App_Key"] = []string{"kept"}
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
	for _, want := range []string{"X-Forwarded-For: 127.0.0.1", "X-Forwarded-Host: " + inst + ".apps.test:8080", "X-Forwarded-Proto: http",
		"X_app_key: kept"} {
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
		if tc.method == "GET" { // a link: a navigation (foreign refuses any other GET from another origin's page)
			req.Header.Set("Sec-Fetch-Mode", "navigate")
			req.Header.Set("Sec-Fetch-Dest", "document")
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

// TestGatewayFetchMetadataIsolatesApps: every app's origin is the same
// site as every other, so the browser sends the app cookie with a request
// another tenant's app page makes in the background (a credentialed fetch,
// an <img>, a <script>). An app that reflects the caller's Origin in CORS
// with credentials would hand the person's data to that page. By the
// browser's fetch metadata, the gateway sends on only what the app's own
// pages ask for, what the person does (navigations, also into the
// console's iframe), and what comes from no browser; the rest gets a 403
// page that says why, sets no cookie, and never reaches the app.
func TestGatewayFetchMetadataIsolatesApps(t *testing.T) {
	onBothListeners(t, testFetchMetadataIsolatesApps)
}

func testFetchMetadataIsolatesApps(t *testing.T, apps bool) {
	addr, reached := countingApp(t)
	r := newRigOn(t, apps, addr)
	app := r.open(t)
	// Past half its lifetime, the token is renewed on use: a refusal must
	// not hand out the fresh one (nor clear the cookie).
	r.advance(3 * time.Minute)
	for _, tc := range []struct {
		name, method, site, mode, dest string
		refused                        bool
	}{
		{"another app's credentialed fetch", "GET", "same-site", "cors", "empty", true},
		{"another app's <img>", "GET", "same-site", "no-cors", "image", true},
		{"another app's <script>", "GET", "same-site", "no-cors", "script", true},
		{"another site's fetch", "GET", "cross-site", "cors", "empty", true},
		{"another app's <object>", "GET", "same-site", "navigate", "object", true},
		{"another app's <embed>", "GET", "cross-site", "navigate", "embed", true},
		{"another app's preflight", "OPTIONS", "same-site", "cors", "empty", true},
		{"a fetch metadata value unknown here", "GET", "same-party", "cors", "empty", true},
		{"a link from another site", "GET", "cross-site", "navigate", "document", false},
		{"the console's iframe", "GET", "same-site", "navigate", "iframe", false},
		{"a HEAD navigation", "HEAD", "same-site", "navigate", "document", false},
		{"no browser (curl)", "GET", "", "", "", false},
		{"the app's own page's fetch", "GET", "same-origin", "cors", "empty", false},
		{"the app's own page's <img>", "GET", "same-origin", "no-cors", "image", false},
		{"typed into the address bar", "GET", "none", "navigate", "document", false},
	} {
		before, fastBefore := reached.Load(), fastProxied(r)
		h := map[string]string{}
		for k, v := range map[string]string{"Sec-Fetch-Site": tc.site, "Sec-Fetch-Mode": tc.mode, "Sec-Fetch-Dest": tc.dest} {
			if v != "" {
				h[k] = v
			}
		}
		resp, body := r.send(t, tc.method, "/ui/data.json", nil, app, h)
		sent := reached.Load() > before
		if tc.refused {
			if resp.StatusCode != http.StatusForbidden || sent || !strings.Contains(body, "another site") ||
				len(resp.Header.Values("Set-Cookie")) > 0 {
				t.Errorf("%s: %d, reached the app: %v, Set-Cookie %q; want a 403 page that says why, no cookie, nothing sent on (%s)",
					tc.name, resp.StatusCode, sent, resp.Header.Values("Set-Cookie"), body)
			}
			continue
		}
		if resp.StatusCode != http.StatusOK || !sent {
			t.Errorf("%s: %d, reached the app: %v; want it sent on (%s)", tc.name, resp.StatusCode, sent, body)
		}
		if len(appCookies(resp, "__Host-gpuaas_app")) != 1 {
			t.Errorf("%s: the renewed app token was not set: %q", tc.name, resp.Header.Values("Set-Cookie"))
		}
		// On the apps listener, what goes on goes on the fast path (HEAD
		// always takes the slow one).
		if apps && tc.method != "HEAD" && fastProxied(r) == fastBefore {
			t.Errorf("%s: not proxied on the apps listener's fast path", tc.name)
		}
	}
}

// fastProxied is how many requests the rig's apps listener proxied on its
// fast path (0 on the console's listener).
func fastProxied(r *rig) int64 {
	if r.apps == nil {
		return 0
	}
	return r.apps.proxied.Load()
}

// The one-time code's redemption is a navigation from the console (the
// same site as the apps, or another site when the apps domain is on the
// Public Suffix List); it is handled before any app token is looked at,
// and fetch metadata does not stand in its way.
func TestGatewayOpenLinkIsANavigationFromElsewhere(t *testing.T) {
	onBothListeners(t, func(t *testing.T, apps bool) {
		addr, reached := countingApp(t)
		r := newRigOn(t, apps, addr)
		for i, site := range []string{"same-site", "cross-site"} {
			code := fmt.Sprint("nav", i)
			r.backend.mu.Lock()
			r.backend.codes[code] = instances.UIGrant{UserID: "u", InstanceID: inst, Port: 8080}
			r.backend.mu.Unlock()
			resp, body := r.send(t, "GET", "/__gpuaas/open?code="+code+"&path=%2Fui%2F", nil, nil,
				map[string]string{"Sec-Fetch-Site": site, "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "iframe", "Accept": "text/html"})
			cookies := appCookies(resp, "__Host-gpuaas_app")
			if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ui/" || len(cookies) != 1 {
				t.Fatalf("%s: open: %d → %q, cookies %v (%s)", site, resp.StatusCode, resp.Header.Get("Location"), cookies, body)
			}
			// The redirect it answers is followed as the same navigation.
			resp, body = r.send(t, "GET", "/ui/", nil, cookies[0],
				map[string]string{"Sec-Fetch-Site": site, "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "iframe", "Accept": "text/html"})
			if resp.StatusCode != http.StatusOK || body != "done" {
				t.Errorf("%s: the app after the open link: %d %q", site, resp.StatusCode, body)
			}
		}
		if n := reached.Load(); n != 2 {
			t.Errorf("the app was reached %d times, want 2", n)
		}
	})
}

// On the apps listener's fast path the fetch metadata are read in place:
// deciding allocates nothing.
func TestFastForeignAllocatesNothing(t *testing.T) {
	var h fasthttp.RequestHeader
	h.SetMethod("GET")
	h.Set("Sec-Fetch-Site", "same-site")
	h.Set("Sec-Fetch-Mode", "navigate")
	h.Set("Sec-Fetch-Dest", "iframe")
	h.Set("Origin", "http://x.apps.test")
	own := "http://" + inst + ".apps.test:8080"
	if n := testing.AllocsPerRun(100, func() {
		if fastForeign(&h, own) {
			t.Fatal("a navigation into the console's iframe was refused")
		}
	}); n != 0 {
		t.Errorf("fastForeign allocates %v times a request", n)
	}
}
