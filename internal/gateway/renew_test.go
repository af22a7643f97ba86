package gateway

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/clock"
	"github.com/gpuaas/gpuaas/internal/instances"
)

// advance moves the rig's clock on by d.
func (r *rig) advance(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.now = r.now.Add(d)
}

// rechecked is how many times the backend was asked to re-check, and the
// grants it was asked about.
func (f *fakeBackend) rechecked() []instances.UIGrant {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]instances.UIGrant(nil), f.rechecks...)
}

func (f *fakeBackend) setRefuse(v bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refuse = v
}

// appCookies are the Set-Cookie lines of an answer for name.
func appCookies(resp *http.Response, name string) []*http.Cookie {
	var out []*http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == name {
			out = append(out, c)
		}
	}
	return out
}

// An app token past half its lifetime is renewed on use while the person
// may still open the app (the backend re-checks), so an app page in use
// keeps working past the token's lifetime; once the re-check refuses, the
// token is as good as none.
func TestGatewayRenewsAnAppTokenPastHalfLife(t *testing.T) {
	onBothListeners(t, testRenewsPastHalfLife)
}

func testRenewsPastHalfLife(t *testing.T, apps bool) {
	up := echoUpstream(t) // it tries to set the platform's cookie too
	r := newRigOn(t, apps, up.Listener.Addr().String())
	first := r.open(t)
	do := func(tok, accept string) *http.Response { t.Helper(); return r.appGet(t, "/ui/api", tok, accept) }
	proxied := func() int64 {
		if r.apps == nil {
			return 0
		}
		return r.apps.proxied.Load()
	}

	// Before half its lifetime: no re-check, no new cookie.
	r.advance(time.Minute)
	if resp := do(first.Value, ""); resp.StatusCode != 200 || len(appCookies(resp, "__Host-gpuaas_app")) != 0 || len(r.backend.rechecked()) != 0 {
		t.Fatalf("a young token: %d, cookies %v, %d re-checks", resp.StatusCode, resp.Header.Values("Set-Cookie"), len(r.backend.rechecked()))
	}

	// Past it: re-checked, and a fresh cookie alike the first.
	r.advance(2 * time.Minute) // 3m in
	before := proxied()
	resp := do(first.Value, "")
	cks := appCookies(resp, "__Host-gpuaas_app")
	if resp.StatusCode != 200 || len(cks) != 1 {
		t.Fatalf("past half-life: %d, Set-Cookie %v; want 200 and one fresh app cookie", resp.StatusCode, resp.Header.Values("Set-Cookie"))
	}
	fresh := cks[0]
	if fresh.Value == first.Value || fresh.Value == "forged" || !fresh.Secure || !fresh.HttpOnly || fresh.Path != "/" ||
		fresh.Domain != "" || fresh.SameSite != http.SameSiteLaxMode || fresh.MaxAge != 300 {
		t.Errorf("fresh cookie %+v, want a new token with the first's attributes (%+v)", fresh, first)
	}
	if got := r.backend.rechecked(); len(got) != 1 || got[0] != (instances.UIGrant{UserID: "u", InstanceID: inst, Port: 8080}) {
		t.Errorf("re-checks: %+v", got)
	}
	if apps && proxied() != before+1 {
		t.Errorf("the renewing request was not proxied on the apps listener's fast path")
	}
	// The first token again (a request already under way): the same fresh
	// token, no second re-check.
	if resp := do(first.Value, ""); resp.StatusCode != 200 || len(appCookies(resp, "__Host-gpuaas_app")) != 1 ||
		appCookies(resp, "__Host-gpuaas_app")[0].Value != fresh.Value || len(r.backend.rechecked()) != 1 {
		t.Errorf("the first token again: %d %v, %d re-checks", resp.StatusCode, resp.Header.Values("Set-Cookie"), len(r.backend.rechecked()))
	}

	// Past the first token's end, the fresh one works on.
	r.advance(2*time.Minute + time.Second) // 5m1s in
	if resp := do(first.Value, ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the first token after its end: %d", resp.StatusCode)
	}
	if resp := do(fresh.Value, ""); resp.StatusCode != 200 || len(appCookies(resp, "__Host-gpuaas_app")) != 0 {
		t.Errorf("the fresh token: %d %v", resp.StatusCode, resp.Header.Values("Set-Cookie"))
	}

	// The person's role is removed: past its half-life, the fresh token
	// is refused as none is.
	r.backend.setRefuse(true)
	r.advance(time.Minute) // 6m1s in: the fresh one is 3m1s old
	if resp := do(fresh.Value, ""); resp.StatusCode != http.StatusUnauthorized || len(appCookies(resp, "__Host-gpuaas_app")) != 0 {
		t.Errorf("a refused re-check, API call: %d %v, want 401", resp.StatusCode, resp.Header.Values("Set-Cookie"))
	}
	if resp := do(fresh.Value, "text/html"); resp.StatusCode != http.StatusSeeOther ||
		!strings.HasPrefix(resp.Header.Get("Location"), "http://console.test:8080/workloads/instance/"+inst+"/open?") {
		t.Errorf("a refused re-check, page load: %d → %q, want the way through the console", resp.StatusCode, resp.Header.Get("Location"))
	}
	if n := len(r.backend.rechecked()); n != 2 {
		t.Errorf("%d re-checks, want 2 (a refusal is kept for the token)", n)
	}
}

// In path mode the fresh cookie is the instance's own, scoped to its path.
func TestGatewayRenewsInPathMode(t *testing.T) {
	up := echoUpstream(t)
	clk := clock.NewManual(time.Now())
	backend := &fakeBackend{codes: map[string]instances.UIGrant{"c": {UserID: "u", InstanceID: inst, Port: 8080}},
		up: map[string]instances.UIUpstream{inst: {InstanceID: inst, Status: "running", Embedded: true, ContainerPort: 8080, Addr: up.Listener.Addr().String()}}}
	g := New(Config{Domain: "apps.test", PathMode: true, PublicURL: func() string { return "http://console.test" }, Key: []byte("k"),
		Backend: backend, Now: clk.Now})
	front := httptest.NewServer(g.Wrap(http.NotFoundHandler()))
	defer front.Close()
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	base := PathBase(inst)
	resp, err := hc.Get(front.URL + base + OpenPath + "?code=c&path=/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	name := "gpuaas_app_" + inst
	opened := appCookies(resp, name)
	if len(opened) != 1 {
		t.Fatalf("open: %v", resp.Header.Values("Set-Cookie"))
	}
	clk.Advance(3 * time.Minute)
	req, _ := http.NewRequest("GET", front.URL+base+"/x", nil)
	req.AddCookie(opened[0])
	resp, err = hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cks := appCookies(resp, name)
	if resp.StatusCode != 200 || len(cks) != 1 || cks[0].Value == opened[0].Value || cks[0].Path != base+"/" ||
		cks[0].Secure != opened[0].Secure || !cks[0].HttpOnly {
		t.Errorf("path mode renewal: %d %v", resp.StatusCode, resp.Header.Values("Set-Cookie"))
	}
}

// A WebSocket outlives its app token while the person may still open the
// app (re-checked each time its token would have ended), and is closed at
// the re-check that refuses.
func TestGatewayWebSocketEndsWithItsAccess(t *testing.T) {
	onBothListeners(t, testWebSocketEndsWithAccess)
}

func testWebSocketEndsWithAccess(t *testing.T, apps bool) {
	const ttl = time.Second // an app token's end is in whole seconds
	addr, _ := rawApp(t, func(c net.Conn, br *bufio.Reader) {
		if !readRequest(t, br) {
			return
		}
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: abc\r\n\r\n")
		io.Copy(c, br) // an echo of whatever comes
	})
	r := newRigOn(t, apps, addr, func(c *Config) { c.TokenTTL = ttl })
	app := r.open(t)
	c, br := r.upgrade(t, app)
	echo := func(msg string) error {
		if _, err := io.WriteString(c, msg); err != nil {
			return err
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(br, got); err != nil {
			return err
		}
		if string(got) != msg {
			return fmt.Errorf("echo %q, want %q", got, msg)
		}
		return nil
	}
	if err := echo("hello"); err != nil {
		t.Fatal(err)
	}

	// An hour on, the token is long over: the WebSocket stays while the
	// re-checks allow it, each a lifetime after the one before.
	for n := 1; n <= 2; n++ {
		r.advance(time.Hour)
		deadline := time.Now().Add(10 * time.Second)
		for len(r.backend.rechecked()) < n {
			if time.Now().After(deadline) {
				t.Fatalf("%d re-checks of the WebSocket's grant 10s after its token's end, want %d", len(r.backend.rechecked()), n)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err := echo(fmt.Sprint("still here ", n)); err != nil {
			t.Fatalf("past its token's end, with %d re-checks allowing it: %v", n, err)
		}
	}
	if got := r.backend.rechecked()[0]; got != (instances.UIGrant{UserID: "u", InstanceID: inst, Port: 8080}) {
		t.Errorf("re-checked grant %+v", got)
	}

	// The role is removed: the next re-check closes it.
	r.backend.setRefuse(true)
	r.advance(time.Hour)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := io.Copy(io.Discard, br)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal("the WebSocket was still open 10s after its access was refused")
	}
}

// An answer the app streams (here server-sent events) goes on past its app
// token's end while the person may still open the app (re-checked when a
// piece arrives past it, then once a lifetime), and ends at the piece that
// arrives once the re-check refuses: that piece never reaches the browser.
func TestGatewayEventStreamEndsWithItsAccess(t *testing.T) {
	onBothListeners(t, testEventStreamEndsWithAccess)
}

func testEventStreamEndsWithAccess(t *testing.T, apps bool) {
	send := make(chan string)
	addr, _ := rawApp(t, func(c net.Conn, br *bufio.Reader) {
		if !readRequest(t, br) {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
		for ev := range send {
			if _, err := fmt.Fprintf(c, "%x\r\n%s\r\n", len(ev), ev); err != nil {
				return
			}
		}
	})
	r := newRigOn(t, apps, addr)
	app := r.open(t)
	req, _ := http.NewRequest("GET", "http://"+inst+".apps.test:8080/events", nil)
	req.AddCookie(app)
	lines := make(chan string)
	head := make(chan struct{})
	go func() {
		defer close(lines)
		resp, err := r.client().Do(req)
		if err != nil {
			t.Error(err)
			return
		}
		close(head)
		defer resp.Body.Close()
		br := bufio.NewReader(resp.Body)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			if line != "\n" {
				lines <- line
			}
		}
	}()
	event := func(ev string) (string, bool) {
		t.Helper()
		select {
		case send <- "data: " + ev + "\n\n":
		case <-time.After(10 * time.Second):
			t.Fatalf("the app could not send %q", ev)
		}
		select {
		case line, ok := <-lines:
			return line, ok
		case <-time.After(10 * time.Second):
			t.Fatalf("%q did not come through, nor did the stream end", ev)
			return "", false
		}
	}
	defer close(send)

	// The answer's head comes before its first event, as the app sent it
	// (an EventSource is open then).
	select {
	case <-head:
	case <-time.After(10 * time.Second):
		t.Fatal("the answer's head did not come before its first piece")
	}
	if got, _ := event("one"); got != "data: one\n" {
		t.Fatalf("first event: %q", got)
	}
	if n := len(r.backend.rechecked()); n != 0 {
		t.Errorf("%d re-checks inside the token's lifetime", n)
	}
	// An hour on: allowed, the event passes, and the access is held a
	// lifetime more without asking again.
	r.advance(time.Hour)
	if got, _ := event("two"); got != "data: two\n" {
		t.Fatalf("past the token's end, allowed: %q", got)
	}
	if got, _ := event("three"); got != "data: three\n" || len(r.backend.rechecked()) != 1 {
		t.Fatalf("within the renewed lifetime: %q, %d re-checks, want 1", got, len(r.backend.rechecked()))
	}
	if got := r.backend.rechecked()[0]; got != (instances.UIGrant{UserID: "u", InstanceID: inst, Port: 8080}) {
		t.Errorf("re-checked grant %+v", got)
	}

	// The role is removed: the next event ends the stream, unseen.
	r.backend.setRefuse(true)
	r.advance(time.Hour)
	if got, ok := event("secret"); ok {
		t.Fatalf("after the access was refused the stream went on: %q", got)
	}
}
