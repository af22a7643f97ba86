package gateway

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/instances"
	"github.com/gpuaas/gpuaas/internal/wakeup"
)

// fakeBackend stands in for the instances domain: this tests the gateway
// alone (the real path runs in internal/doctest's browser test).
type fakeBackend struct {
	mu     sync.Mutex
	codes  map[string]instances.UIGrant
	up     map[string]instances.UIUpstream
	panics bool // UIUpstreamOf panics (set before requests run)
	// refuse makes RecheckUI refuse; rechecks are the grants it was asked.
	refuse   bool
	rechecks []instances.UIGrant
}

func (f *fakeBackend) RecheckUI(_ context.Context, g instances.UIGrant) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rechecks = append(f.rechecks, g)
	if f.refuse {
		return errdefs.NotFound("ui_access_ended", "no longer")
	}
	return nil
}

func (f *fakeBackend) RedeemUI(_ context.Context, code, instanceID string) (instances.UIGrant, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	g, ok := f.codes[code]
	if !ok || g.InstanceID != instanceID {
		return instances.UIGrant{}, errdefs.NotFound("ui_code_invalid", "expired or used")
	}
	delete(f.codes, code)
	return g, nil
}

func (f *fakeBackend) UIUpstreamOf(_ context.Context, id string) (instances.UIUpstream, error) {
	if f.panics {
		panic("backend bug")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	up, ok := f.up[id]
	if !ok {
		return up, errdefs.NotFound("app_instance_not_found", "no")
	}
	return up, nil
}

const inst = "0193aaaa-bbbb-7ccc-8ddd-eeeeffff0000"

type rig struct {
	gw      *Gateway
	front   *httptest.Server // on the console's listener
	addr    string           // where the gateway listens
	apps    *AppsServer      // on the apps listener
	backend *fakeBackend
	now     time.Time
	mu      sync.Mutex
}

// newRig runs a gateway in front of upstream, with the console at
// http://console.test and apps under apps.test, on the console's listener.
func newRig(t testing.TB, upstream string, opts ...func(*Config)) *rig {
	return newRigOn(t, false, upstream, opts...)
}

// newRigOn is newRig, on the apps listener (AppsServer) when apps is true.
func newRigOn(t testing.TB, apps bool, upstream string, opts ...func(*Config)) *rig {
	r := &rig{backend: &fakeBackend{codes: map[string]instances.UIGrant{}, up: map[string]instances.UIUpstream{
		inst:                                   {InstanceID: inst, Status: "running", Embedded: true, ContainerPort: 8080, Path: "/ui/", Addr: upstream},
		"0193aaaa-bbbb-7ccc-8ddd-000000000001": {InstanceID: "0193aaaa-bbbb-7ccc-8ddd-000000000001", Status: "deploying", Embedded: true, ContainerPort: 8080},
	}}, now: time.Now()}
	cfg := Config{Domain: "apps.test", PublicURL: func() string { return "http://console.test:8080" }, Key: []byte("k"),
		Backend: r.backend, StripCookies: []string{"gpuaas_session"},
		IsPlatformToken: func(_ context.Context, tok string) bool { return strings.HasPrefix(tok, "platform.") },
		Now:             func() time.Time { r.mu.Lock(); defer r.mu.Unlock(); return r.now }}
	for _, o := range opts {
		o(&cfg)
	}
	r.gw = New(cfg)
	if apps {
		r.serveApps(t, AppsServerConfig{IdleTimeout: time.Minute})
		return r
	}
	r.front = httptest.NewServer(r.gw.Wrap(http.NotFoundHandler()))
	t.Cleanup(r.front.Close)
	r.addr = r.front.Listener.Addr().String()
	return r
}

// serveApps puts the rig's gateway on an apps listener (AppsServer) with
// cfg; the rig's client goes there from then on.
func (r *rig) serveApps(t testing.TB, cfg AppsServerConfig) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := r.gw.NewAppsServer(cfg)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	})
	r.addr, r.apps = l.Addr().String(), srv
}

// serveConsole puts the rig's gateway behind a console listener (net/http)
// with the server's whole-request read and write timeouts, as gpuaas
// server runs it; the rig's client goes there from then on.
func (r *rig) serveConsole(t testing.TB, read, write time.Duration) {
	front := httptest.NewUnstartedServer(r.gw.Wrap(http.NotFoundHandler()))
	front.Config.ReadTimeout, front.Config.WriteTimeout = read, write
	front.Start()
	t.Cleanup(front.Close)
	r.front, r.addr = front, front.Listener.Addr().String()
}

// onBothListeners runs test against the gateway on the console's listener
// (net/http) and on the apps listener (AppsServer): the same requests must
// get the same treatment on both.
func onBothListeners(t *testing.T, test func(t *testing.T, apps bool)) {
	t.Run("console-listener", func(t *testing.T) { test(t, false) })
	t.Run("apps-listener", func(t *testing.T) { test(t, true) })
}

// dial opens a connection to the rig's listener, closed when the test ends.
func (r *rig) dial(t testing.TB) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", r.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// upgrade opens a WebSocket to the instance's /ui/echo with the app
// cookie, and fails the test unless the upgrade is switched.
func (r *rig) upgrade(t testing.TB, app *http.Cookie) (net.Conn, *bufio.Reader) {
	t.Helper()
	c := r.dial(t)
	fmt.Fprintf(c, "GET /ui/echo HTTP/1.1\r\nHost: %s.apps.test:8080\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nOrigin: http://%s.apps.test:8080\r\n"+
		"Cookie: __Host-gpuaas_app=%s\r\n\r\n", inst, inst, app.Value)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	return c, br
}

// client reaches any host on the rig's listener and follows no redirect.
func (r *rig) client() *http.Client { return clientTo(r.addr) }

// appGet GETs path on the instance's origin with the app token tok (and
// Accept, when accept is set), and returns the answer, its body read.
func (r *rig) appGet(t testing.TB, path, tok, accept string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+inst+".apps.test:8080"+path, nil)
	req.Header.Set("Cookie", "__Host-gpuaas_app="+tok)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := r.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// clientTo reaches any host at addr and follows no redirect.
func clientTo(addr string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, n, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, n, addr)
	}}, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// open redeems a fresh code and returns the app cookie.
func (r *rig) open(t testing.TB) *http.Cookie {
	t.Helper()
	r.backend.mu.Lock()
	r.backend.codes["c1"] = instances.UIGrant{UserID: "u", InstanceID: inst, Port: 8080}
	r.backend.mu.Unlock()
	resp, err := r.client().Get("http://" + inst + ".apps.test:8080/__gpuaas/open?code=c1&path=%2Fui%2F")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ui/" {
		t.Fatalf("open: %d → %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	for _, c := range resp.Cookies() {
		if c.Name == "__Host-gpuaas_app" && c.Secure && c.HttpOnly && c.Path == "/" && c.Domain == "" {
			return c
		}
	}
	t.Fatalf("no __Host- app cookie: %v", resp.Header["Set-Cookie"])
	return nil
}

func echoUpstream(t *testing.T) *httptest.Server {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.SetCookie(w, &http.Cookie{Name: "__Host-gpuaas_app", Value: "forged"})
		http.SetCookie(w, &http.Cookie{Name: "app_state", Value: "1"})
		w.Header().Set("X-Seen-Cookie", r.Header.Get("Cookie"))
		w.Header().Set("X-Seen-Authorization", r.Header.Get("Authorization"))
		w.Header().Set("X-Seen-Host", r.Host)
		io.WriteString(w, "app "+r.URL.Path)
	}))
	t.Cleanup(up.Close)
	return up
}

func TestGatewayStripsPlatformCredentials(t *testing.T) {
	onBothListeners(t, testStripsPlatformCredentials)
}

func testStripsPlatformCredentials(t *testing.T, apps bool) {
	up := echoUpstream(t)
	r := newRigOn(t, apps, up.Listener.Addr().String())
	app := r.open(t)
	for _, tc := range []struct{ auth, want string }{
		{"Bearer platform.jwt", ""},
		{"Bearer sk-own-key", "Bearer sk-own-key"},
	} {
		req, _ := http.NewRequest("GET", "http://"+inst+".apps.test:8080/ui/x", nil)
		req.Header.Set("Cookie", "__Host-gpuaas_app="+app.Value+"; gpuaas_session=s; theme=dark")
		req.Header.Set("Authorization", tc.auth)
		resp, err := r.client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("proxied: %d", resp.StatusCode)
		}
		if got := resp.Header.Get("X-Seen-Cookie"); got != "theme=dark" {
			t.Errorf("the app saw Cookie %q", got)
		}
		if got := resp.Header.Get("X-Seen-Authorization"); got != tc.want {
			t.Errorf("Authorization %q reached the app as %q; want %q", tc.auth, got, tc.want)
		}
		if got := resp.Header.Get("X-Seen-Host"); got != inst+".apps.test:8080" {
			t.Errorf("the app saw Host %q", got)
		}
		for _, sc := range resp.Header.Values("Set-Cookie") {
			if strings.HasPrefix(sc, "__Host-gpuaas_app") {
				t.Errorf("the app set the platform's cookie: %s", sc)
			}
		}
		if len(resp.Header.Values("Set-Cookie")) != 1 {
			t.Errorf("the app's own cookie did not pass: %v", resp.Header.Values("Set-Cookie"))
		}
		if csp := resp.Header.Get("Content-Security-Policy"); csp != "frame-ancestors http://console.test:8080" {
			t.Errorf("CSP %q", csp)
		}
	}
}

func TestGatewayRefusals(t *testing.T) { onBothListeners(t, testRefusals) }

func testRefusals(t *testing.T, apps bool) {
	up := echoUpstream(t)
	r := newRigOn(t, apps, up.Listener.Addr().String())
	app := r.open(t)
	do := func(host, path string, h map[string]string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+host+":8080"+path, nil)
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := r.client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	// No token: a page load goes to the console to sign in and come back.
	resp := do(inst+".apps.test", "/ui/?tab=1", map[string]string{"Accept": "text/html"})
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther ||
		loc != "http://console.test:8080/workloads/instance/"+inst+"/open?path=%2Fui%2F%3Ftab%3D1" {
		t.Errorf("no token, page load: %d → %q", resp.StatusCode, loc)
	}
	if resp := do(inst+".apps.test", "/ui/api", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("no token, API call: %d", resp.StatusCode)
	}
	// The app token of one instance opens no other.
	other := "0193aaaa-bbbb-7ccc-8ddd-000000000001"
	if resp := do(other+".apps.test", "/", map[string]string{"Cookie": "__Host-gpuaas_app=" + app.Value}); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("another instance's token: %d", resp.StatusCode)
	}
	// A code is redeemed once.
	if resp := do(inst+".apps.test", "/__gpuaas/open?code=c1", nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("replayed code: %d", resp.StatusCode)
	}
	// The token expires.
	r.mu.Lock()
	r.now = r.now.Add(5*time.Minute + time.Second)
	r.mu.Unlock()
	if resp := do(inst+".apps.test", "/ui/api", map[string]string{"Cookie": "__Host-gpuaas_app=" + app.Value}); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("expired token: %d", resp.StatusCode)
	}
	// A tampered token fails its signature.
	r.mu.Lock()
	r.now = time.Now()
	r.mu.Unlock()
	tampered := app.Value[:len(app.Value)-2] + "xx"
	if resp := do(inst+".apps.test", "/ui/api", map[string]string{"Cookie": "__Host-gpuaas_app=" + tampered}); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("tampered token: %d", resp.StatusCode)
	}
	// Redirects after the code stay on the app's origin, whatever path
	// the link carries (a browser drops the tab and reads "//evil.example").
	for i, p := range []string{"//evil.example/", "https://evil.example/", `/\evil.example`, "/\t/evil.example", "/\n/evil.example"} {
		code := fmt.Sprintf("bad-path-%d", i)
		r.backend.mu.Lock()
		r.backend.codes[code] = instances.UIGrant{UserID: "u", InstanceID: inst, Port: 8080}
		r.backend.mu.Unlock()
		resp := do(inst+".apps.test", "/__gpuaas/open?"+url.Values{"code": {code}, "path": {p}}.Encode(), nil)
		if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || loc != "/" {
			t.Errorf("open with path %q: %d → %q, want 303 → /", p, resp.StatusCode, loc)
		}
	}
}

func TestGatewayExplainsAnInstanceThatIsNotRunning(t *testing.T) {
	onBothListeners(t, testExplainsAnInstanceThatIsNotRunning)
}

func testExplainsAnInstanceThatIsNotRunning(t *testing.T, apps bool) {
	r := newRigOn(t, apps, "127.0.0.1:1")
	other := "0193aaaa-bbbb-7ccc-8ddd-000000000001"
	r.backend.codes["c2"] = instances.UIGrant{UserID: "u", InstanceID: other, Port: 8080}
	hc := r.client()
	resp, err := hc.Get("http://" + other + ".apps.test:8080/__gpuaas/open?code=c2&path=/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var ck *http.Cookie
	for _, c := range resp.Cookies() {
		ck = c
	}
	req, _ := http.NewRequest("GET", "http://"+other+".apps.test:8080/", nil)
	req.AddCookie(ck)
	resp, err = hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "deploying") ||
		!strings.Contains(string(body), "/workloads/instance/"+other) {
		t.Errorf("not running: %d %s", resp.StatusCode, body)
	}
}

// The upgrade reaches the app with the handshake headers spelled as RFC
// 6455 spells them, and only from the app's own origin.
func TestGatewayWebSocketUpgrade(t *testing.T) { onBothListeners(t, testWebSocketUpgrade) }

func testWebSocketUpgrade(t *testing.T, apps bool) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	lines := make(chan []string, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		var got []string
		for {
			line, err := br.ReadString('\n')
			if err != nil || line == "\r\n" {
				break
			}
			got = append(got, strings.TrimRight(line, "\r\n"))
		}
		lines <- got
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: abc\r\n\r\n")
		io.WriteString(c, "raw-after-upgrade")
	}()
	r := newRigOn(t, apps, l.Addr().String())
	app := r.open(t)
	dial := func(origin string) (*http.Response, net.Conn) {
		c, err := net.Dial("tcp", r.addr)
		if err != nil {
			t.Fatal(err)
		}
		req := "GET /ui/echo HTTP/1.1\r\nHost: " + inst + ".apps.test:8080\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
			"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nOrigin: " + origin +
			"\r\nSec-WebSocket-Protocol: chat, bearer.platform.tok, bearer.apps-own-key" +
			"\r\nCookie: __Host-gpuaas_app=" + app.Value + "\r\n\r\n"
		io.WriteString(c, req)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		return resp, c
	}
	resp, c := dial("http://evil.example")
	c.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("foreign origin: %d", resp.StatusCode)
	}
	resp, c = dial("http://" + inst + ".apps.test:8080")
	defer c.Close()
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %d", resp.StatusCode)
	}
	got := <-lines
	// The app's subprotocols and its own key go on; a platform token
	// offered as one does not.
	for _, want := range []string{"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version: 13",
		"Sec-WebSocket-Protocol: chat, bearer.apps-own-key"} {
		found := false
		for _, l := range got {
			found = found || l == want
		}
		if !found {
			t.Errorf("the app did not get %q exactly; it got %q", want, got)
		}
	}
	for _, l := range got {
		if strings.HasPrefix(strings.ToLower(l), "cookie:") {
			t.Errorf("the platform cookie reached the app: %s", l)
		}
		if strings.Contains(l, "platform.tok") {
			t.Errorf("the platform token reached the app: %s", l)
		}
	}
}

func TestOpenURL(t *testing.T) {
	g := New(Config{Domain: "apps.example.com", PublicURL: func() string { return "https://console.example.com" }, Backend: &fakeBackend{}})
	u, err := url.Parse(g.OpenURL(inst, "/lab", "abc"))
	if err != nil || u.Scheme != "https" || u.Host != inst+".apps.example.com" || u.Path != OpenPath ||
		u.Query().Get("code") != "abc" || u.Query().Get("path") != "/lab" {
		t.Errorf("OpenURL: %v %v", u, err)
	}
	// An apps listener reached straight (gpuaas dev): its port, not the
	// console's.
	port := ""
	g = New(Config{Domain: "apps.localhost", PublicURL: func() string { return "http://127.0.0.1:8080" },
		AppsPort: func() string { return port }, Backend: &fakeBackend{}})
	if got := g.OpenURL(inst, "/", "abc"); !strings.HasPrefix(got, "http://"+inst+".apps.localhost:8080"+OpenPath+"?") {
		t.Errorf("OpenURL without an apps port: %s", got)
	}
	port = "41234"
	if got := g.OpenURL(inst, "/", "abc"); !strings.HasPrefix(got, "http://"+inst+".apps.localhost:41234"+OpenPath+"?") {
		t.Errorf("OpenURL with the apps listener's port: %s", got)
	}
	g = New(Config{Domain: "apps.example.com", PathMode: true, PublicURL: func() string { return "https://console.example.com" }, Backend: &fakeBackend{}})
	if got := g.OpenURL(inst, "/", "abc"); !strings.HasPrefix(got, "https://console.example.com/apps/instances/"+inst+"/ui"+OpenPath+"?") {
		t.Errorf("path mode OpenURL: %s", got)
	}
}

// Path mode: the UI under /apps/instances/<id>/ui/ on the console's origin,
// its own cookie scoped to that path, the prefix forwarded (the gateway's,
// whatever the browser sent).
func TestGatewayPathMode(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Seen-Prefix", r.Header.Get("X-Forwarded-Prefix"))
		w.Header().Set("X-Seen-Underscored-Prefix", r.Header.Get("X_Forwarded_Prefix"))
		w.Header().Set("X-Seen-Cookie", r.Header.Get("Cookie"))
		io.WriteString(w, r.URL.Path)
	}))
	defer up.Close()
	backend := &fakeBackend{codes: map[string]instances.UIGrant{"c": {UserID: "u", InstanceID: inst, Port: 8080}},
		up: map[string]instances.UIUpstream{inst: {InstanceID: inst, Status: "running", Embedded: true, ContainerPort: 8080, Addr: up.Listener.Addr().String()}}}
	g := New(Config{Domain: "apps.test", PathMode: true, PublicURL: func() string { return "http://console.test" }, Key: []byte("k"), Backend: backend})
	front := httptest.NewServer(g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "console") })))
	defer front.Close()
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	base := PathBase(inst)
	resp, err := hc.Get(front.URL + base + OpenPath + "?code=c&path=/lab/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cks := resp.Cookies()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != base+"/lab/" || len(cks) != 1 ||
		cks[0].Name != "gpuaas_app_"+inst || cks[0].Path != base+"/" {
		t.Fatalf("open: %d %q %v", resp.StatusCode, resp.Header.Get("Location"), cks)
	}
	req, _ := http.NewRequest("GET", front.URL+base+"/lab/", nil)
	req.AddCookie(cks[0])
	req.Header.Set("X-Forwarded-Prefix", "/admin")        // the gateway's, not the browser's
	req.Header["X_Forwarded_Prefix"] = []string{"/admin"} // one name to a CGI or WSGI app
	resp, err = hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != base+"/lab/" || resp.Header.Get("X-Seen-Prefix") != base || resp.Header.Get("X-Seen-Cookie") != "" {
		t.Errorf("path mode proxy: %q prefix %q cookie %q", body, resp.Header.Get("X-Seen-Prefix"), resp.Header.Get("X-Seen-Cookie"))
	}
	if got := resp.Header.Get("X-Seen-Underscored-Prefix"); got != "" {
		t.Errorf("the browser's X_Forwarded_Prefix reached the app: %q", got)
	}
	// Outside an instance's UI prefix, the console answers.
	resp, _ = hc.Get(front.URL + "/apps/instances/" + inst + "/other")
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "console" {
		t.Errorf("a path outside the UI prefix went to the gateway: %q", body)
	}
}

// A Set-Cookie line is judged by the name a browser reads in it (the text
// before the first '=', spaces and tabs trimmed), not by whether Go can
// parse it: browsers take lines Go rejects, and such a line must not set or
// clear the platform's cookie either. The app's own cookies pass, however
// they are spelt.
func TestGatewayKeepsThePlatformCookieFromLinesGoRejects(t *testing.T) {
	onBothListeners(t, testPlatformCookieFromOddLines)
}

func testPlatformCookieFromOddLines(t *testing.T, apps bool) {
	answer := "HTTP/1.1 200 OK\r\n" +
		"Set-Cookie: __Host-gpuaas_app=forged\\x; Path=/; Secure; HttpOnly\r\n" +
		"Set-Cookie: __Host-gpuaas_app=\"a\"b; Path=/; Secure\r\n" +
		"Set-Cookie: \t__Host-gpuaas_app =forged; Path=/; Secure\r\n" +
		"Set-Cookie: gpuaas_session=\"x\"y; Path=/\r\n" +
		"Set-Cookie: gpuaas_app_" + inst + "=a b; Path=/\r\n" +
		"Set-Cookie: app_state=1\r\n" +
		"Set-Cookie: theme=\"a\"b; Path=/\r\n" +
		"Content-Length: 2\r\n\r\nok"
	r := newRigOn(t, apps, answeringApp(t, answer))
	app := r.open(t)
	req, _ := http.NewRequest("GET", "http://"+inst+".apps.test:8080/", nil)
	req.AddCookie(app)
	resp, err := r.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	got := resp.Header.Values("Set-Cookie")
	if want := []string{"app_state=1", `theme="a"b; Path=/`}; resp.StatusCode != 200 || strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("%d; Set-Cookie that reached the browser:\n%s\nwant only the app's:\n%s", resp.StatusCode, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestSetCookieName(t *testing.T) {
	for line, want := range map[string]string{
		"a=b; Path=/":         "a",
		" \ta \t=b":           "a",
		`__Host-x="a"b`:       "__Host-x",
		"noequals; Path=/":    "",
		"noequals":            "",
		"=v":                  "",
		"a; b=c":              "",
		"a=b=c; d=e":          "a",
		"__Host-gpuaas_app=x": "__Host-gpuaas_app",
	} {
		if got := setCookieName(line); got != want {
			t.Errorf("setCookieName(%q) = %q, want %q", line, got, want)
		}
	}
}

// The Host header is anyone's to write: only a DNS label under the apps
// domain, with a numeric port if any, is an instance's origin, and what
// matches is exactly that label and origin.
func FuzzMatchHost(f *testing.F) {
	for _, s := range []string{inst + ".apps.test", inst + ".apps.test:8443", "A.APPS.TEST", "x.y.apps.test", ".apps.test",
		"a b.apps.test", "a\".apps.test:1", "a.apps.test:", "a.apps.test:port", "-a.apps.test", "apps.test", "a.apps.test.",
		"[::1]:80", "a%2f.apps.test", "é.apps.test"} {
		f.Add(s)
	}
	g := New(Config{Domain: "apps.test", PublicURL: func() string { return "https://console.test" }, Backend: &fakeBackend{}})
	label := regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
	f.Fuzz(func(t *testing.T, hostport string) {
		tg, ok := g.matchHost(hostport)
		if !ok {
			return
		}
		if !label.MatchString(tg.instanceID) {
			t.Fatalf("%q matched instance %q, not a DNS label", hostport, tg.instanceID)
		}
		rest, _ := strings.CutPrefix(tg.origin, "https://"+tg.instanceID+".apps.test")
		if rest != "" && !regexp.MustCompile(`^:[0-9]{1,5}$`).MatchString(rest) {
			t.Fatalf("%q matched with origin %q", hostport, tg.origin)
		}
	})
}

func TestMatchHostTakesOnlyALabelUnderTheDomain(t *testing.T) {
	g := New(Config{Domain: "apps.test", PublicURL: func() string { return "https://console.test" }, Backend: &fakeBackend{}})
	for host, want := range map[string]string{
		inst + ".apps.test": inst, inst + ".APPS.test:8443": inst, "x.y.apps.test": "", "a b.apps.test": "",
		`a".apps.test`: "", "a.apps.test:": "", "a.apps.test:http": "", "-a.apps.test": "", "a_b.apps.test": "",
	} {
		tg, ok := g.matchHost(host)
		if ok != (want != "") || tg.instanceID != want {
			t.Errorf("matchHost(%q) = %q %v, want %q", host, tg.instanceID, ok, want)
		}
	}
}

// A request to tear an instance down (or move it) wakes every replica on
// wakeup.InstanceOperations, and the gateway forgets what it remembered of
// every instance: the next request reads the instance again and is not
// proxied to an address it no longer serves on, which its node may give to
// another instance, within the two seconds the gateway would have kept it.
func TestGatewayForgetsAnInstanceAtItsNextOperation(t *testing.T) {
	onBothListeners(t, func(t *testing.T, apps bool) {
		up := echoUpstream(t)
		hub := wakeup.New()
		r := newRigOn(t, apps, up.Listener.Addr().String(), func(c *Config) { c.Wake = hub })
		tok := r.open(t).Value
		get := func() int { return r.appGet(t, "/ui/", tok, "").StatusCode }
		if code := get(); code != http.StatusOK {
			t.Fatalf("running: %d", code)
		}
		// The instance's decommission commits; the rig's clock stands still,
		// well inside the time the gateway remembers an address.
		r.backend.mu.Lock()
		r.backend.up[inst] = instances.UIUpstream{InstanceID: inst, Status: "decommissioning", Embedded: true, ContainerPort: 8080}
		r.backend.mu.Unlock()
		hub.Notify(wakeup.InstanceOperations)
		if code := get(); code != http.StatusServiceUnavailable {
			t.Fatalf("after the decommission's notice the request got %d, not the instance's state (503)", code)
		}
	})
}

// A name under the apps domain that is no app's origin (two labels deep,
// the domain itself, a trailing dot, other case) gets not-found from the
// gateway, on both listeners: the console behind it is never served on
// the apps' site.
func TestGatewayServesNoConsoleUnderTheAppsDomain(t *testing.T) {
	onBothListeners(t, func(t *testing.T, apps bool) {
		r := newRigOn(t, apps, "127.0.0.1:1")
		for _, host := range []string{"a.b.apps.test:8080", "apps.test:8080", "APPS.test", inst + ".apps.test.:8080", "x_y.apps.test"} {
			req, _ := http.NewRequest("GET", "http://"+host+"/", nil)
			resp, err := r.client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), "serves app UIs only") {
				t.Errorf("%s: %d %s, want the gateway's not-found page", host, resp.StatusCode, body)
			}
		}
		if apps {
			return
		}
		// On the console's listener the console's own name still reaches
		// what the gateway wraps (the rig's: net/http's plain 404).
		resp, err := r.client().Get("http://console.test:8080/")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "404 page not found\n" {
			t.Errorf("the console's host did not reach the wrapped handler: %d %q", resp.StatusCode, body)
		}
	})
}
