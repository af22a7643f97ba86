package gateway

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/internal/instances"
	"github.com/gpuaas/gpuaas/internal/testbin"
)

// get sends a GET with the app cookie through the rig.
func (r *rig) get(t *testing.T, path string, app *http.Cookie, h map[string]string) (*http.Response, string) {
	t.Helper()
	return r.send(t, "GET", path, nil, app, h)
}

// send sends a request for the instance's origin with the app cookie
// through the rig, and reads the answer.
func (r *rig) send(t *testing.T, method, path string, body io.Reader, app *http.Cookie, h map[string]string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://"+inst+".apps.test:8080"+path, body)
	if app != nil {
		req.AddCookie(app)
	}
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := r.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(answer)
}

// What identifies a proxy to the app is the gateway's alone: the client's
// X-Forwarded-*, Forwarded and X-Real-IP are replaced or dropped (an app
// may trust them), and the headers of one connection (those Connection
// names too) stay on it.
func TestGatewayForwardedAndHopByHopHeaders(t *testing.T) { onBothListeners(t, testForwardedHeaders) }

func testForwardedHeaders(t *testing.T, apps bool) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, h := range []string{"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "Forwarded", "X-Real-IP",
			"X-Forwarded-Prefix", "X-Hop", "Keep-Alive", "X-App"} {
			fmt.Fprintf(w, "%s=%s\n", h, strings.Join(r.Header.Values(h), ","))
		}
	}))
	t.Cleanup(up.Close)
	r := newRigOn(t, apps, up.Listener.Addr().String())
	app := r.open(t)
	resp, body := r.get(t, "/", app, map[string]string{"X-Forwarded-For": "6.6.6.6", "X-Forwarded-Host": "evil.example",
		"X-Forwarded-Proto": "https", "Forwarded": "for=6.6.6.6", "X-Real-IP": "6.6.6.6", "X-Forwarded-Prefix": "/admin",
		"Connection": "keep-alive, X-Hop", "X-Hop": "1",
		"Keep-Alive": "timeout=5", "X-App": "kept"})
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	want := "X-Forwarded-For=127.0.0.1\nX-Forwarded-Host=" + inst + ".apps.test:8080\nX-Forwarded-Proto=http\nForwarded=\nX-Real-IP=\nX-Forwarded-Prefix=\nX-Hop=\nKeep-Alive=\nX-App=kept\n"
	if body != want {
		t.Errorf("the app saw\n%s\nwant\n%s", body, want)
	}
}

// The apps listener proxies an authorised request itself, streaming its
// body to the app as it arrives and the app's answer back as it is
// written; everything else goes to the gateway's net/http path.
func TestAppsListenerStreamsBothWays(t *testing.T) {
	got1MiB := make(chan struct{})
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/upload":
			h := sha256.New()
			n, err := io.CopyN(h, r.Body, 1<<20)
			if err != nil {
				http.Error(w, err.Error(), 500)
				return
			}
			close(got1MiB) // before the client has sent the rest
			m, _ := io.Copy(h, r.Body)
			fmt.Fprintf(w, "%d %s", n+m, hex.EncodeToString(h.Sum(nil)))
		case "/events":
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: one\n\n")
			w.(http.Flusher).Flush()
			<-release // until the test has read the first event through the gateway
			io.WriteString(w, "data: two\n\n")
		}
	}))
	t.Cleanup(up.Close)
	r := newRigOn(t, true, up.Listener.Addr().String())
	app := r.open(t)

	// An upload of 8 MiB in chunks: the app has its first MiB while the
	// client still holds the rest back.
	pr, pw := io.Pipe()
	sum := sha256.New()
	go func() {
		chunk := []byte(strings.Repeat("gpuaas!\n", 1<<14)) // 128 KiB
		for i := range 64 {
			if i == 8 {
				select {
				case <-got1MiB:
				case <-time.After(10 * time.Second):
					pw.CloseWithError(fmt.Errorf("the app did not get the first MiB before the rest was sent: the body was buffered"))
					return
				}
			}
			sum.Write(chunk)
			if _, err := pw.Write(chunk); err != nil {
				return
			}
		}
		pw.Close()
	}()
	resp, body := r.send(t, "POST", "/upload", pr, app, nil)
	if want := fmt.Sprintf("%d %s", 8<<20, hex.EncodeToString(sum.Sum(nil))); resp.StatusCode != 200 || body != want {
		t.Fatalf("upload: %d %q, want %q", resp.StatusCode, body, want)
	}

	// Server-sent events: the first arrives while the app still writes.
	req, _ := http.NewRequest("GET", "http://"+inst+".apps.test:8080/events", nil)
	req.AddCookie(app)
	first := make(chan string, 1)
	var br *bufio.Reader
	go func() {
		var err error
		resp, err = r.client().Do(req)
		if err != nil {
			first <- err.Error()
			return
		}
		br = bufio.NewReader(resp.Body)
		line, _ := br.ReadString('\n')
		first <- line
	}()
	select {
	case line := <-first:
		if line != "data: one\n" {
			close(release)
			t.Fatalf("first event: %q", line)
		}
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("the first event did not come through while the app was still answering")
	}
	defer resp.Body.Close()
	close(release)
	rest, _ := io.ReadAll(br)
	if string(rest) != "\ndata: two\n\n" {
		t.Errorf("rest of the stream: %q", rest)
	}
	if resp.Header.Get("Content-Type") != "text/event-stream" ||
		resp.Header.Get("Content-Security-Policy") != "frame-ancestors http://console.test:8080" {
		t.Errorf("headers: %v", resp.Header)
	}
	if n := r.apps.proxied.Load(); n != 2 {
		t.Errorf("the apps listener proxied %d requests itself, want 2", n)
	}
}

// Requests the gateway answers itself get the same answers on the apps
// listener as on the console's (TestGatewayRefusals runs on both); here,
// what only the apps listener has: another host, an unauthenticated
// upload, a HEAD, an app that does not answer.
func TestAppsListenerLeavesTheRestToTheGateway(t *testing.T) {
	up := echoUpstream(t)
	var logs testbin.Output
	r := newRigOn(t, true, up.Listener.Addr().String(), warningsTo(&logs))
	app := r.open(t)

	req, _ := http.NewRequest("GET", "http://console.test:8080/", nil)
	resp, err := r.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(b), "app UIs only") {
		t.Errorf("the console's host on the apps listener: %d %s", resp.StatusCode, b)
	}

	// An upload without the app token is refused without being read.
	c := r.dial(t)
	fmt.Fprintf(c, "POST /ui/upload HTTP/1.1\r\nHost: %s.apps.test:8080\r\nContent-Length: %d\r\n\r\n%s", inst, 1<<30, strings.Repeat("x", 1<<20))
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err = http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("unauthenticated upload: %v", err)
	}
	if resp.StatusCode != http.StatusUnauthorized || !resp.Close {
		t.Errorf("unauthenticated upload: %d, close %v", resp.StatusCode, resp.Close)
	}

	req, _ = http.NewRequest("HEAD", "http://"+inst+".apps.test:8080/ui/x", nil)
	req.AddCookie(app)
	resp, err = r.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-Seen-Cookie") != "" {
		t.Errorf("HEAD: %d %v", resp.StatusCode, resp.Header)
	}

	if resp, body := r.get(t, "/ui/x", app, nil); resp.StatusCode != 200 || body != "app /ui/x" {
		t.Fatalf("GET: %d %q", resp.StatusCode, body)
	}
	if n := r.apps.proxied.Load(); n != 1 {
		t.Errorf("proxied %d requests itself, want 1 (the GET)", n)
	}
	if w := logs.String(); w != "" {
		t.Errorf("warnings (none of these requests' bodies is read): %s", w)
	}
	up.Close()
	if resp, body := r.get(t, "/ui/x", app, nil); resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "did not answer") {
		t.Errorf("app gone: %d %s", resp.StatusCode, body)
	}
}

// For a proxied request the read and write timeouts bound each wait for
// the browser, not a whole request: a slow upload and a long event stream
// go on while they move, an app may take its time to answer, and a
// browser that stops sending mid-body is cut off.
func TestGatewayTimeoutsBoundEachWait(t *testing.T) { onBothListeners(t, testTimeoutsBoundEachWait) }

func testTimeoutsBoundEachWait(t *testing.T, apps bool) {
	const d = 300 * time.Millisecond
	appErr := make(chan error, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/upload":
			n, err := io.Copy(io.Discard, r.Body)
			if err != nil {
				appErr <- err
				return
			}
			fmt.Fprint(w, n)
		case "/late": // a model's answer, say: long in coming, then whole
			time.Sleep(4 * d)
			io.WriteString(w, "late")
		case "/events":
			for i := range 12 {
				fmt.Fprintf(w, "data: %d\n\n", i)
				w.(http.Flusher).Flush()
				time.Sleep(d / 3)
			}
		}
	}))
	t.Cleanup(up.Close)
	r, app := newTimedRig(t, apps, up.Listener.Addr().String(), d)

	// 12 pieces, one every d/3: four times the read timeout in all.
	pr, pw := io.Pipe()
	go func() {
		for range 12 {
			pw.Write([]byte(strings.Repeat("x", 1000)))
			time.Sleep(d / 3)
		}
		pw.Close()
	}()
	if resp, body := r.send(t, "POST", "/upload", pr, app, nil); resp.StatusCode != 200 || body != "12000" {
		t.Errorf("slow upload: %d %q", resp.StatusCode, body)
	}

	if resp, events := r.get(t, "/events", app, nil); resp.StatusCode != 200 || strings.Count(events, "data:") != 12 {
		t.Errorf("long stream: %d %q", resp.StatusCode, events)
	}
	if resp, body := r.get(t, "/late", app, nil); resp.StatusCode != 200 || body != "late" {
		t.Errorf("an answer four timeouts late: %d %q", resp.StatusCode, body)
	}

	// A body that stops coming: the connection is cut after d.
	c := r.dial(t)
	fmt.Fprintf(c, "POST /upload HTTP/1.1\r\nHost: %s.apps.test:8080\r\nCookie: __Host-gpuaas_app=%s\r\nContent-Length: 1000000\r\n\r\n%s",
		inst, app.Value, strings.Repeat("x", 100<<10))
	select {
	case err := <-appErr:
		if err == nil {
			t.Error("the app read a whole body that never came")
		}
	case <-time.After(10 * time.Second):
		t.Error("a stalled upload was not cut off")
	}
}

// An app that spells its headers in lower case cannot set the platform's
// cookie that way, and its framing headers are the gateway's to write.
func TestGatewayAppHeadersInLowerCase(t *testing.T) { onBothListeners(t, testLowerCaseAnswer) }

func testLowerCaseAnswer(t *testing.T, apps bool) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, req.Body)
					io.WriteString(c, "HTTP/1.1 200 OK\r\nset-cookie: __Host-gpuaas_app=forged; Path=/\r\nset-cookie: app_state=1\r\n"+
						"content-type: text/plain\r\nconnection: keep-alive, x-conn-only\r\nx-conn-only: 1\r\ncontent-length: 2\r\n\r\nok")
				}
			}()
		}
	}()
	r := newRigOn(t, apps, l.Addr().String())
	app := r.open(t)
	for range 2 { // the second over a reused connection to the app
		resp, body := r.get(t, "/", app, nil)
		if resp.StatusCode != 200 || body != "ok" {
			t.Fatalf("%d %q", resp.StatusCode, body)
		}
		if sc := resp.Header.Values("Set-Cookie"); len(sc) != 1 || !strings.HasPrefix(sc[0], "app_state=1") {
			t.Errorf("Set-Cookie that reached the browser: %q", sc)
		}
		if resp.Header.Get("X-Conn-Only") != "" || resp.Header.Get("Content-Type") != "text/plain" {
			t.Errorf("headers: %v", resp.Header)
		}
	}
}

// A panic while serving one request fails that request, not the server.
func TestAppsListenerSurvivesAPanic(t *testing.T) {
	up := echoUpstream(t)
	r := newRig(t, up.Listener.Addr().String())
	app := r.open(t)
	r.backend.panics = true
	r.serveApps(t, AppsServerConfig{IdleTimeout: time.Minute})
	if resp, _ := r.get(t, "/ui/x", app, nil); resp.StatusCode != http.StatusInternalServerError {
		t.Errorf("panicking request: %d", resp.StatusCode)
	}
	if resp, _ := r.get(t, "/ui/x", nil, nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the next request: %d", resp.StatusCode)
	}
}

// newTimedRig is a rig on the apps listener (apps) or the console's, with
// read and write timeouts d on both the listener and the gateway, as the
// server sets them; it returns the app cookie.
func newTimedRig(t *testing.T, apps bool, upstream string, d time.Duration) (*rig, *http.Cookie) {
	r := newRig(t, upstream, func(c *Config) { c.ReadTimeout, c.WriteTimeout = d, d })
	app := r.open(t)
	if apps {
		r.serveApps(t, AppsServerConfig{ReadTimeout: d, WriteTimeout: d, IdleTimeout: time.Minute})
	} else {
		r.serveConsole(t, d, d)
	}
	return r, app
}

// Connections to an app are pooled, and before one carries a request it is
// looked at: one the app closed while it sat idle (an app server's
// keep-alive timeout, a few seconds in many) must not fail the request, a
// POST included, and bytes the app sent on it unasked must not be read as
// the next answer, which may be another person's.
func TestGatewayChecksAPooledConnectionBeforeUse(t *testing.T) {
	onBothListeners(t, testChecksPooledConnection)
}

func testChecksPooledConnection(t *testing.T, apps bool) {
	var answered atomic.Int64
	stray := make(chan struct{})
	addr, accepted := rawApp(t, func(c net.Conn, br *bufio.Reader) {
		for readRequest(t, br) {
			switch answered.Add(1) {
			case 1: // then closes the connection, idle in the gateway's pool
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				time.Sleep(50 * time.Millisecond)
				return
			case 2: // then, a moment later, an answer to no request
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\npost")
				time.Sleep(50 * time.Millisecond)
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsmuggl")
				close(stray)
			default:
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfresh")
			}
		}
	})
	r := newRigOn(t, apps, addr)
	app := r.open(t)
	if resp, body := r.get(t, "/", app, nil); resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("first GET: %d %q", resp.StatusCode, body)
	}
	time.Sleep(200 * time.Millisecond) // the app has closed that connection
	if resp, body := r.send(t, "POST", "/form", strings.NewReader("a=1"), app, nil); resp.StatusCode != 200 || body != "post" {
		t.Fatalf("POST after the app closed the pooled connection: %d %q", resp.StatusCode, body)
	}
	<-stray
	time.Sleep(50 * time.Millisecond) // on loopback, long enough to arrive
	if resp, body := r.get(t, "/", app, nil); resp.StatusCode != 200 || body != "fresh" {
		t.Fatalf("GET after the app wrote unasked: %d %q", resp.StatusCode, body)
	}
	if n := accepted.Load(); n != 3 {
		t.Errorf("%d connections to the app, want 3", n)
	}
}

// A browser that goes away while the app works on its request lets the app
// go: the app's connection closes, which is how an app learns that nobody
// waits for its answer (vLLM, say, stops a generation then). Before the
// answer began and during a quiet stream alike.
func TestGatewayLetsTheAppGoWhenTheBrowserDoes(t *testing.T) {
	onBothListeners(t, testLetsTheAppGo)
}

func testLetsTheAppGo(t *testing.T, apps bool) {
	released := make(chan string, 2)
	ended := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/stream" {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: first\n\n")
			w.(http.Flusher).Flush()
		}
		select {
		case <-r.Context().Done(): // net/http's server cancels it when the connection closes
			released <- r.URL.Path
		case <-ended:
		}
	}))
	t.Cleanup(up.Close)
	t.Cleanup(func() { close(ended) }) // first: up.Close waits for the handlers
	// Timeouts shorter than the wait: the watch for the browser outlasts
	// them.
	const d = 100 * time.Millisecond
	r, app := newTimedRig(t, apps, up.Listener.Addr().String(), d)
	for _, path := range []string{"/slow", "/stream"} {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+inst+".apps.test:8080"+path, nil)
		req.AddCookie(app)
		time.AfterFunc(400*time.Millisecond, cancel)
		if resp, err := r.client().Do(req); err == nil {
			if path == "/slow" {
				t.Fatalf("%s answered %d before the browser went", path, resp.StatusCode)
			}
			io.Copy(io.Discard, resp.Body) // until the browser goes
			resp.Body.Close()
		}
		select {
		case got := <-released:
			if got != path {
				t.Fatalf("the app let go of %s, want %s", got, path)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: the app still holds a request whose browser went away", path)
		}
	}
}

// An app that drops a reused connection as a request arrives on it, without
// answering: a GET goes once more on a new connection, as a browser's
// would; a POST is not sent twice (the app may have acted on it), and the
// browser is told.
func TestGatewayResendsOnlyWhatIsSafeToRepeat(t *testing.T) {
	onBothListeners(t, func(t *testing.T, apps bool) { testResendsOnlyWhatIsSafe(t, apps, false) })
}

// The same, when the app resets the connection (it closed with the request
// unread, or its host's stack did) rather than closing it.
func TestGatewayResendsAfterAReset(t *testing.T) {
	onBothListeners(t, func(t *testing.T, apps bool) { testResendsOnlyWhatIsSafe(t, apps, true) })
}

func testResendsOnlyWhatIsSafe(t *testing.T, apps, reset bool) {
	var mu sync.Mutex
	posted := map[string]int{}
	addr, accepted := rawApp(t, func(c net.Conn, br *bufio.Reader) {
		for n := 0; ; n++ {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			b, _ := io.ReadAll(req.Body)
			if req.Method == "POST" {
				mu.Lock()
				posted[string(b)]++
				mu.Unlock()
			}
			if n == 1 { // the second request on a connection: dropped unanswered
				if reset {
					_ = c.(*net.TCPConn).SetLinger(0) // the close sends a reset
				}
				return
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\none")
		}
	})
	r := newRigOn(t, apps, addr)
	app := r.open(t)
	for i := range 2 {
		if resp, body := r.get(t, "/", app, nil); resp.StatusCode != 200 || body != "one" {
			t.Fatalf("GET %d: %d %q", i, resp.StatusCode, body)
		}
	}
	if n := accepted.Load(); n != 2 {
		t.Fatalf("%d connections after two GETs, want 2 (the second GET sent again on a new one)", n)
	}
	// Each POST goes first or second on its connection (bodies and GETs
	// may not share a pool); at least one is dropped.
	dropped := 0
	for i := range 3 {
		resp, body := r.send(t, "POST", "/", strings.NewReader(fmt.Sprint("p", i)), app, nil)
		switch {
		case resp.StatusCode == http.StatusBadGateway:
			dropped++
		case resp.StatusCode != 200 || body != "one":
			t.Errorf("POST %d: %d %q", i, resp.StatusCode, body)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for b, n := range posted {
		if n != 1 {
			t.Errorf("the app got POST %s %d times, want once", b, n)
		}
	}
	if dropped == 0 || len(posted) != 3 {
		t.Errorf("%d POSTs dropped, %d reached the app: want at least one dropped, all three there", dropped, len(posted))
	}
}

// Watching the browser's connection while the app is slow reads nothing
// from it: a request the browser sends meanwhile (pipelined) is served
// after, and the connection goes on carrying requests.
func TestAppsListenerWatchLeavesTheConnectionAsItWas(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			time.Sleep(400 * time.Millisecond)
		}
		io.WriteString(w, r.Method+" "+r.URL.Path)
	}))
	t.Cleanup(up.Close)
	r := newRig(t, up.Listener.Addr().String())
	app := r.open(t)
	r.serveApps(t, AppsServerConfig{ReadTimeout: 5 * time.Second, IdleTimeout: time.Minute})
	c := r.dial(t)
	send := func(path string) {
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s.apps.test:8080\r\nCookie: __Host-gpuaas_app=%s\r\n\r\n", path, inst, app.Value)
	}
	br := bufio.NewReader(c)
	expect := func(want string) {
		t.Helper()
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("waiting for %s: %v", want, err)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || string(b) != want {
			t.Fatalf("got %d %q, want %s", resp.StatusCode, b, want)
		}
	}
	send("/slow")
	time.Sleep(250 * time.Millisecond) // the watch has begun
	send("/fast")
	expect("GET /slow")
	expect("GET /fast")
	send("/slow")
	expect("GET /slow")
}

// A WebSocket lives as long as both ends keep it: the listeners' read and
// write timeouts, meant for requests, do not end a quiet one.
func TestGatewayWebSocketOutlivesTheTimeouts(t *testing.T) { onBothListeners(t, testWebSocketOutlives) }

func testWebSocketOutlives(t *testing.T, apps bool) {
	const d = 150 * time.Millisecond
	addr, _ := rawApp(t, func(c net.Conn, br *bufio.Reader) {
		if !readRequest(t, br) {
			return
		}
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: abc\r\n\r\n")
		io.Copy(c, br) // an echo of whatever comes
	})
	r, app := newTimedRig(t, apps, addr, d)
	c, br := r.upgrade(t, app)
	for i := range 2 {
		time.Sleep(4 * d) // quiet for longer than both timeouts
		msg := fmt.Sprint("ping ", i)
		if _, err := io.WriteString(c, msg); err != nil {
			t.Fatalf("write after %v quiet: %v", 4*d, err)
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(br, got); err != nil || string(got) != msg {
			t.Fatalf("echo after %v quiet: %q %v", 4*d, got, err)
		}
	}
}

// The app gets the request's target as the browser sent it: escaped
// slashes stay escaped (Jupyter's file paths are such), dot segments and
// double slashes are not cleaned up, the query is untouched.
func TestGatewayPassesTheTargetAsSent(t *testing.T) { onBothListeners(t, testTargetAsSent) }

func testTargetAsSent(t *testing.T, apps bool) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.RequestURI)
	}))
	t.Cleanup(up.Close)
	r := newRigOn(t, apps, up.Listener.Addr().String())
	app := r.open(t)
	for _, target := range []string{
		"/api/contents/notebooks%2Fa%20b.ipynb?content=1&x=%2F",
		"/files//twice/./dot/../up?q=a+b&q=%26",
	} {
		c, err := net.Dial("tcp", r.addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s.apps.test:8080\r\nCookie: __Host-gpuaas_app=%s\r\nConnection: close\r\n\r\n", target, inst, app.Value)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		c.Close()
		if resp.StatusCode != 200 || string(b) != target {
			t.Errorf("sent %s, the app got %d %q", target, resp.StatusCode, b)
		}
	}
}

// An app that refuses an upload before it has all of it (413, say) is
// heard: the browser gets the app's answer, not a page saying the app did
// not answer.
func TestGatewayPassesOnAnEarlyAnswer(t *testing.T) { onBothListeners(t, testEarlyAnswer) }

func testEarlyAnswer(t *testing.T, apps bool) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.CopyN(io.Discard, r.Body, 1<<10)
		w.Header().Set("Connection", "close")
		w.WriteHeader(http.StatusRequestEntityTooLarge)
		io.WriteString(w, "at most 1 KiB")
	}))
	t.Cleanup(up.Close)
	r := newRigOn(t, apps, up.Listener.Addr().String())
	app := r.open(t)
	for range 3 {
		resp, body := r.send(t, "POST", "/upload", strings.NewReader(strings.Repeat("x", 8<<20)), app, nil)
		if resp.StatusCode != http.StatusRequestEntityTooLarge || body != "at most 1 KiB" {
			t.Errorf("an 8 MiB upload the app refused early: %d %q", resp.StatusCode, body)
		}
	}
	// The same for the gateway's own refusal: an upload without the app
	// token gets the 401 page while the browser is still sending.
	for range 3 {
		if resp, _ := r.send(t, "POST", "/upload", strings.NewReader(strings.Repeat("x", 8<<20)), nil, nil); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("an 8 MiB upload without the app token: %d", resp.StatusCode)
		}
	}
}

// warningsTo has a rig's gateway log its warnings to out.
func warningsTo(out *testbin.Output) func(*Config) {
	return func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
}

// A browser that half-closes its connection (or leaves) while the app
// works on its request gets no answer the app did not give: 502, and the
// connection ends, on both listeners.
func TestGatewayInventsNoAnswerForABrowserThatLeft(t *testing.T) {
	onBothListeners(t, testNoAnswerForABrowserThatLeft)
}

func testNoAnswerForABrowserThatLeft(t *testing.T, apps bool) {
	ended := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-ended:
		}
		io.WriteString(w, "too late")
	}))
	t.Cleanup(up.Close)
	t.Cleanup(func() { close(ended) })
	r := newRigOn(t, apps, up.Listener.Addr().String())
	app := r.open(t)
	c := r.dial(t)
	fmt.Fprintf(c, "GET /slow HTTP/1.1\r\nHost: %s.apps.test:8080\r\nCookie: __Host-gpuaas_app=%s\r\n\r\n", inst, app.Value)
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer after the browser half-closed: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusBadGateway {
		t.Errorf("a browser that half-closed got %d, want 502", resp.StatusCode)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("the connection goes on after the answer to a browser that left: %v", err)
	}
}

// Requests the gateway answers itself (a refusal, the code's redemption, a
// HEAD, an upgrade it refuses) carry no body: they keep their connection,
// and nothing is read into memory for them.
func TestGatewayKeepsTheConnectionAfterItsOwnAnswers(t *testing.T) {
	onBothListeners(t, testKeepsConnectionAfterOwnAnswers)
}

func testKeepsConnectionAfterOwnAnswers(t *testing.T, apps bool) {
	up := echoUpstream(t)
	var logs testbin.Output
	r := newRigOn(t, apps, up.Listener.Addr().String(), warningsTo(&logs))
	app := r.open(t)
	r.backend.mu.Lock()
	r.backend.codes["c2"] = instances.UIGrant{UserID: "u", InstanceID: inst, Port: 8080}
	r.backend.mu.Unlock()
	c := r.dial(t)
	br := bufio.NewReader(c)
	host := inst + ".apps.test:8080"
	for _, tc := range []struct {
		name, req string
		status    int
	}{
		{"page load without the token", "GET /ui/ HTTP/1.1\r\nHost: " + host + "\r\nAccept: text/html\r\n\r\n", http.StatusSeeOther},
		{"API call without the token", "GET /ui/api HTTP/1.1\r\nHost: " + host + "\r\n\r\n", http.StatusUnauthorized},
		{"a code's redemption", "GET /__gpuaas/open?code=c2&path=/ HTTP/1.1\r\nHost: " + host + "\r\n\r\n", http.StatusSeeOther},
		{"HEAD", "HEAD /ui/x HTTP/1.1\r\nHost: " + host + "\r\nCookie: __Host-gpuaas_app=" + app.Value + "\r\n\r\n", http.StatusOK},
		{"an upgrade from another origin", "GET /ui/ws HTTP/1.1\r\nHost: " + host + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
			"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nOrigin: http://evil.example\r\n" +
			"Cookie: __Host-gpuaas_app=" + app.Value + "\r\n\r\n", http.StatusForbidden},
		{"a form without a body", "POST /ui/api HTTP/1.1\r\nHost: " + host + "\r\nContent-Length: 0\r\n\r\n", http.StatusUnauthorized},
	} {
		io.WriteString(c, tc.req)
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(br, &http.Request{Method: strings.Fields(tc.req)[0]})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != tc.status || resp.Close {
			t.Fatalf("%s: %d, close %v; want %d on a connection that goes on", tc.name, resp.StatusCode, resp.Close, tc.status)
		}
	}
	if w := logs.String(); w != "" {
		t.Errorf("warnings: %s", w)
	}
}

// An answer with no body by definition (204, 304) leaves the app's
// connection fit for the next request; one whose body ends with the
// connection does not.
func TestGatewayKeepsTheAppsConnectionAfterABodilessAnswer(t *testing.T) {
	onBothListeners(t, testKeepsAppConnectionAfterBodiless)
}

func testKeepsAppConnectionAfterBodiless(t *testing.T, apps bool) {
	var answered atomic.Int64
	addr, accepted := rawApp(t, func(c net.Conn, br *bufio.Reader) {
		for readRequest(t, br) {
			switch answered.Add(1) {
			case 1:
				io.WriteString(c, "HTTP/1.1 204 No Content\r\n\r\n")
			case 2:
				io.WriteString(c, "HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\n\r\n")
			case 3: // its end is the connection's
				io.WriteString(c, "HTTP/1.1 200 OK\r\n\r\nuntil close")
				return
			default:
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfresh")
			}
		}
	})
	r := newRigOn(t, apps, addr)
	app := r.open(t)
	for _, want := range []struct {
		status int
		body   string
	}{{204, ""}, {304, ""}, {200, "until close"}, {200, "fresh"}} {
		if resp, body := r.get(t, "/", app, nil); resp.StatusCode != want.status || body != want.body {
			t.Fatalf("got %d %q, want %d %q", resp.StatusCode, body, want.status, want.body)
		}
	}
	if n := accepted.Load(); n != 2 {
		t.Errorf("%d connections to the app, want 2 (one for 204, 304 and the body read until close, one after)", n)
	}
}

// The browser gets the Content-Type the app sent, and none where it sent
// none: the browser sniffs then (an HTML page renders as HTML), as it
// does on the console's listener, where net/http's sniffing agrees.
func TestGatewayInventsNoContentType(t *testing.T) { onBothListeners(t, testInventsNoContentType) }

func testInventsNoContentType(t *testing.T, apps bool) {
	const page = "<!doctype html><html><body><p>hello</p></body></html>"
	var answered atomic.Int64
	addr, _ := rawApp(t, func(c net.Conn, br *bufio.Reader) {
		for readRequest(t, br) {
			if answered.Add(1) == 1 {
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(page), page)
			} else {
				io.WriteString(c, "HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\n\r\n")
			}
		}
	})
	r := newRigOn(t, apps, addr)
	app := r.open(t)
	resp, body := r.get(t, "/", app, nil)
	if ct := resp.Header.Values("Content-Type"); resp.StatusCode != 200 || body != page ||
		(len(ct) > 0 && (len(ct) > 1 || !strings.HasPrefix(ct[0], "text/html"))) {
		t.Errorf("an HTML page the app sent without Content-Type: %d, Content-Type %q", resp.StatusCode, ct)
	}
	resp, _ = r.get(t, "/", app, map[string]string{"If-None-Match": `"v1"`})
	if ct := resp.Header.Values("Content-Type"); resp.StatusCode != 304 || len(ct) > 0 {
		t.Errorf("304: %d, Content-Type %q", resp.StatusCode, ct)
	}
}

// An HTTP/1.0 browser cannot read chunks: an answer of unknown length goes
// to it as it comes, and the connection's close ends it.
func TestGatewaySendsNoChunksToAnHTTP10Browser(t *testing.T) {
	onBothListeners(t, testNoChunksToHTTP10)
}

func testNoChunksToHTTP10(t *testing.T, apps bool) {
	addr, _ := rawApp(t, func(c net.Conn, br *bufio.Reader) {
		for readRequest(t, br) {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
			time.Sleep(20 * time.Millisecond)
			io.WriteString(c, "6\r\n world\r\n0\r\n\r\n")
		}
	})
	r := newRigOn(t, apps, addr)
	app := r.open(t)
	c := r.dial(t)
	fmt.Fprintf(c, "GET / HTTP/1.0\r\nHost: %s.apps.test:8080\r\nCookie: __Host-gpuaas_app=%s\r\n\r\n", inst, app.Value)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	raw, err := io.ReadAll(c) // to the connection's close
	if err != nil {
		t.Fatal(err)
	}
	head, body, _ := strings.Cut(string(raw), "\r\n\r\n")
	if f := strings.Fields(head); len(f) < 2 || f[1] != "200" || strings.Contains(strings.ToLower(head), "transfer-encoding") || body != "hello world" {
		t.Errorf("an HTTP/1.0 browser got\n%s", raw)
	}
	if apps && r.apps.proxied.Load() != 1 {
		t.Errorf("proxied %d requests on the apps listener's own path, want 1", r.apps.proxied.Load())
	}
}

// A browser whose upload stops short of its Content-Length (it sent part,
// then closed its side) is told so, as one whose upload stalls is: the
// app is not blamed.
func TestGatewayBlamesAShortUploadOnTheBrowser(t *testing.T) {
	onBothListeners(t, testShortUpload)
}

func testShortUpload(t *testing.T, apps bool) {
	appGot := make(chan error, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.Copy(io.Discard, r.Body)
		appGot <- err
		if err == nil {
			io.WriteString(w, "whole")
		}
	}))
	t.Cleanup(up.Close)
	var logs testbin.Output
	r := newRigOn(t, apps, up.Listener.Addr().String(), warningsTo(&logs))
	app := r.open(t)
	c := r.dial(t)
	fmt.Fprintf(c, "POST /upload HTTP/1.1\r\nHost: %s.apps.test:8080\r\nCookie: __Host-gpuaas_app=%s\r\nContent-Length: 1000000\r\n\r\n%s",
		inst, app.Value, strings.Repeat("x", 100<<10))
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("a short upload got no answer: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(b), "The upload stopped") {
		t.Errorf("a short upload: %d %s", resp.StatusCode, b)
	}
	select {
	case err := <-appGot:
		if err == nil {
			t.Error("the app read a short body as whole")
		}
	case <-time.After(10 * time.Second):
		t.Error("the app still waits for the rest of a short body")
	}
	if w := logs.String(); strings.Contains(w, "upstream failed") {
		t.Errorf("a short upload is logged as the app's failure: %s", w)
	}
}
