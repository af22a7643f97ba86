package gateway

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countingServer is an app that counts the connections it accepted and
// closed.
type countingServer struct {
	*httptest.Server
	opened, closed atomic.Int64
}

func newCountingServer(t *testing.T, h http.HandlerFunc) *countingServer {
	s := &countingServer{}
	s.Server = httptest.NewUnstartedServer(h)
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			s.opened.Add(1)
		case http.StateClosed, http.StateHijacked:
			s.closed.Add(1)
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

// recordingRT stands in for net/http's Transport as the fallback.
type recordingRT struct{ calls atomic.Int64 }

func (r *recordingRT) RoundTrip(req *http.Request) (*http.Response, error) {
	r.calls.Add(1)
	return http.DefaultTransport.RoundTrip(req)
}

func testTransport(fallback http.RoundTripper, now func() time.Time) *upstreamTransport {
	if fallback == nil {
		fallback = &recordingRT{}
	}
	if now == nil {
		now = time.Now
	}
	return newUpstreamTransport(fallback, (&net.Dialer{}).DialContext, now)
}

func get(t *testing.T, c *http.Client, u string, readAll bool) string {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if !readAll {
		b := make([]byte, 1)
		_, _ = resp.Body.Read(b)
		return string(b)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestUpstreamKeepsConnectionsAlive(t *testing.T) {
	app := newCountingServer(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, strings.Repeat("x", 10000))
	})
	tr := testTransport(nil, nil)
	c := &http.Client{Transport: tr}
	for range 20 {
		if got := get(t, c, app.URL, true); len(got) != 10000 {
			t.Fatalf("body of %d bytes", len(got))
		}
	}
	if n := app.opened.Load(); n != 1 {
		t.Fatalf("20 GETs one after another opened %d connections, want 1", n)
	}
	// A body closed before its end spoils the connection: the rest of it
	// would be read as the next answer.
	get(t, c, app.URL, false)
	get(t, c, app.URL, true)
	if n := app.opened.Load(); n != 2 {
		t.Fatalf("after a half-read body: %d connections, want 2", n)
	}
	if n := tr.fallback.(*recordingRT).calls.Load(); n != 0 {
		t.Fatalf("GETs went to the fallback %d times", n)
	}
}

func TestUpstreamSendsBodiesAndUpgradesToTheFallback(t *testing.T) {
	app := newCountingServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Write(b)
	})
	fb := &recordingRT{}
	c := &http.Client{Transport: testTransport(fb, nil)}
	resp, err := c.Post(app.URL, "text/plain", strings.NewReader("hello"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "hello" || fb.calls.Load() != 1 {
		t.Fatalf("POST: %q, fallback calls %d", b, fb.calls.Load())
	}
	req, _ := http.NewRequest("GET", app.URL, nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	resp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if fb.calls.Load() != 2 {
		t.Fatalf("an upgrade did not go to the fallback")
	}
	get(t, c, app.URL, true)
	if fb.calls.Load() != 2 {
		t.Fatalf("a plain GET went to the fallback")
	}
}

// answeringApp is a rawApp that answers every request with answer, a
// whole HTTP/1.1 response written as it is.
func answeringApp(t *testing.T, answer string) string {
	addr, _ := rawApp(t, func(c net.Conn, br *bufio.Reader) {
		for readRequest(t, br) {
			io.WriteString(c, answer)
		}
	})
	return addr
}

// rawApp answers each connection with serve, by hand, to produce what a
// well-behaved net/http server would not.
func rawApp(t *testing.T, serve func(c net.Conn, br *bufio.Reader)) (addr string, accepted *atomic.Int64) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted = &atomic.Int64{}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				serve(c, bufio.NewReader(c))
			})
		}
	})
	return l.Addr().String(), accepted
}

func readRequest(t *testing.T, br *bufio.Reader) bool {
	req, err := http.ReadRequest(br)
	if err != nil {
		return false
	}
	req.Body.Close()
	return true
}

func TestUpstreamResendsAGetOnAConnectionTheAppClosed(t *testing.T) {
	// The app keeps no connection alive, though it does not say so: the
	// second GET finds its pooled connection closed.
	addr, accepted := rawApp(t, func(c net.Conn, br *bufio.Reader) {
		if readRequest(t, br) {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	c := &http.Client{Transport: testTransport(nil, nil)}
	for i := range 3 {
		if got := get(t, c, "http://"+addr+"/", true); got != "ok" {
			t.Fatalf("GET %d: %q", i, got)
		}
	}
	if n := accepted.Load(); n != 3 {
		t.Fatalf("%d connections, want 3", n)
	}
}

func TestUpstreamDoesNotResendOnAFreshConnection(t *testing.T) {
	addr, accepted := rawApp(t, func(c net.Conn, br *bufio.Reader) { readRequest(t, br) })
	c := &http.Client{Transport: testTransport(nil, nil)}
	if _, err := c.Get("http://" + addr + "/"); err == nil {
		t.Fatal("an app that closed without answering gave no error")
	}
	if n := accepted.Load(); n != 1 {
		t.Fatalf("the GET was sent on %d connections, want 1", n)
	}
}

func TestUpstreamPassesEarlyHintsOn(t *testing.T) {
	addr, _ := rawApp(t, func(c net.Conn, br *bufio.Reader) {
		if readRequest(t, br) {
			io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </app.css>; rel=preload\r\n\r\n"+
				"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\npage")
		}
	})
	var hints []string
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		hints = append(hints, h.Get("Link"))
		return nil
	}}
	req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "GET", "http://"+addr+"/", nil)
	resp, err := testTransport(nil, nil).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "page" || len(hints) != 1 || hints[0] != "</app.css>; rel=preload" {
		t.Fatalf("got %d %q, hints %q", resp.StatusCode, b, hints)
	}
}

func TestUpstreamGivesUpWhenTheClientGoes(t *testing.T) {
	got := make(chan struct{})
	addr, _ := rawApp(t, func(c net.Conn, br *bufio.Reader) {
		if readRequest(t, br) {
			close(got)
			_, _ = io.Copy(io.Discard, br) // never answers
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-got; cancel() }()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/", nil)
	done := make(chan error, 1)
	go func() { _, err := testTransport(nil, nil).RoundTrip(req); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("RoundTrip still waits on an app that does not answer after its client went")
	}
}

func TestUpstreamClosesIdleConnections(t *testing.T) {
	app := newCountingServer(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	var mu sync.Mutex
	now := time.Unix(1_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	tr := testTransport(nil, clock)
	tr.idleTimeout = 40 * time.Millisecond
	c := &http.Client{Transport: tr}

	// A connection idle past the timeout is not used again.
	get(t, c, app.URL, true)
	advance(time.Second)
	get(t, c, app.URL, true)
	if n := app.opened.Load(); n != 2 {
		t.Fatalf("%d connections, want 2: a stale one was reused", n)
	}
	// Nor does it stay open: the sweep closes it, and the pool empties.
	advance(time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for app.closed.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("idle connections were not closed: %d of 2", app.closed.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.idle) != 0 {
		t.Fatalf("pool still holds %v", tr.idle)
	}
}

func TestUpstreamDropsAConnectionWithBytesNobodyAskedFor(t *testing.T) {
	// The app's first answer carries a second one after its declared body:
	// read as the answer to the next GET, it would reach whoever sent it.
	var answered atomic.Bool
	addr, accepted := rawApp(t, func(c net.Conn, br *bufio.Reader) {
		for readRequest(t, br) {
			if !answered.Swap(true) {
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"+
					"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsmuggl")
				continue
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfresh")
		}
	})
	c := &http.Client{Transport: testTransport(nil, nil)}
	if got := get(t, c, "http://"+addr+"/", true); got != "ok" {
		t.Fatalf("first GET: %q", got)
	}
	if got := get(t, c, "http://"+addr+"/", true); got != "fresh" {
		t.Fatalf("second GET read %q: the stray answer was taken for its own", got)
	}
	if n := accepted.Load(); n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}
}

func TestUpstreamDropsAConnectionTheAppWroteToWhileIdle(t *testing.T) {
	// The stray bytes come after the answer, while the connection sits in
	// the pool: only a look at the socket finds them.
	sent := make(chan struct{})
	var answered atomic.Bool
	addr, _ := rawApp(t, func(c net.Conn, br *bufio.Reader) {
		for readRequest(t, br) {
			if !answered.Swap(true) {
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				time.Sleep(50 * time.Millisecond)
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsmuggl")
				close(sent)
				continue
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfresh")
		}
	})
	c := &http.Client{Transport: testTransport(nil, nil)}
	if got := get(t, c, "http://"+addr+"/", true); got != "ok" {
		t.Fatalf("first GET: %q", got)
	}
	<-sent
	time.Sleep(50 * time.Millisecond) // on loopback, long enough to arrive
	if got := get(t, c, "http://"+addr+"/", true); got != "fresh" {
		t.Fatalf("second GET read %q: the stray answer was taken for its own", got)
	}
}

// Many GETs and HEADs at once, answered with every framing HTTP/1.1 has
// (a length, chunks, none, until close): each answer reaches the request
// it belongs to, whole.
func TestUpstreamNeverMixesAnswers(t *testing.T) {
	app := newCountingServer(t, func(w http.ResponseWriter, r *http.Request) {
		id := r.URL.Query().Get("id")
		body := strings.Repeat(id+";", 1+len(id)%700)
		switch r.URL.Path {
		case "/length":
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			io.WriteString(w, body)
		case "/chunked":
			io.WriteString(w, body[:len(body)/2])
			w.(http.Flusher).Flush()
			io.WriteString(w, body[len(body)/2:])
		case "/close":
			w.Header().Set("Connection", "close")
			io.WriteString(w, body)
		case "/nocontent":
			w.Header().Set("X-Id", id)
			w.WriteHeader(http.StatusNoContent)
		case "/notmodified":
			w.Header().Set("X-Id", id)
			w.WriteHeader(http.StatusNotModified)
		}
	})
	tr := testTransport(nil, nil)
	c := &http.Client{Transport: tr}
	paths := []string{"/length", "/chunked", "/close", "/nocontent", "/notmodified"}
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 150 {
				id := strconv.Itoa(g*1000 + i)
				path := paths[(g+i)%len(paths)]
				method := "GET"
				if i%7 == 0 {
					method = "HEAD"
				}
				req, _ := http.NewRequest(method, app.URL+path+"?id="+id, nil)
				resp, err := c.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil {
					t.Error(err)
					return
				}
				want := strings.Repeat(id+";", 1+len(id)%700)
				switch {
				case path == "/nocontent" || path == "/notmodified":
					if resp.Header.Get("X-Id") != id || len(b) != 0 {
						t.Errorf("%s %s?id=%s: X-Id %q, body %q", method, path, id, resp.Header.Get("X-Id"), b)
					}
				case method == "HEAD":
					if len(b) != 0 {
						t.Errorf("HEAD %s?id=%s: body %q", path, id, b)
					}
				case string(b) != want:
					t.Errorf("GET %s?id=%s: got %q", path, id, b)
				}
			}
		})
	}
	wg.Wait()
	if n := tr.fallback.(*recordingRT).calls.Load(); n != 0 {
		t.Fatalf("%d requests went to the fallback", n)
	}
}

func TestUpstreamBoundsTheAnswersHead(t *testing.T) {
	addr, _ := rawApp(t, func(c net.Conn, br *bufio.Reader) {
		if !readRequest(t, br) {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\n")
		line := "X-Filler: " + strings.Repeat("a", 1000) + "\r\n"
		for range 2 * maxAnswerHead / len(line) {
			if _, err := io.WriteString(c, line); err != nil {
				return // the gateway hung up: what it should do
			}
		}
		io.WriteString(c, "Content-Length: 2\r\n\r\nok")
	})
	req, _ := http.NewRequest("GET", "http://"+addr+"/", nil)
	if _, err := testTransport(nil, nil).RoundTrip(req); !errors.Is(err, errAnswerHeadTooLarge) {
		t.Fatalf("2 MiB of headers: err = %v, want %v", err, errAnswerHeadTooLarge)
	}
}

func TestUpstreamBoundsEarlyAnswers(t *testing.T) {
	for _, n := range []int{max1xx, max1xx + 1} {
		addr, _ := rawApp(t, func(c net.Conn, br *bufio.Reader) {
			if readRequest(t, br) {
				io.WriteString(c, strings.Repeat("HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n", n)+
					"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			}
		})
		req, _ := http.NewRequest("GET", "http://"+addr+"/", nil)
		resp, err := testTransport(nil, nil).RoundTrip(req)
		if n <= max1xx {
			if err != nil {
				t.Fatalf("%d early answers: %v", n, err)
			}
			resp.Body.Close()
			continue
		}
		if err == nil || !strings.Contains(err.Error(), "1xx") {
			t.Fatalf("%d early answers: err = %v, want a refusal", n, err)
		}
	}
}
