package gateway

import (
	"context"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync"
	"testing"
)

// An app's 1xx answers (103 Early Hints) go to the browser under the
// policy its final answer does (appAnswerHeaders): no Set-Cookie for a
// platform cookie, no Clear-Site-Data; its Link goes on. The console's
// listener passes 1xx on, both from a GET (upstreamTransport's own round
// trip) and from a POST (net/http's Transport); the apps listener drops
// them (fasthttp reads past them). Either way the final answer keeps the
// gateway's own headers.
func TestGatewayEarlyHintsKeepTheHeaderPolicy(t *testing.T) {
	onBothListeners(t, testEarlyHintsPolicy)
}

func testEarlyHintsPolicy(t *testing.T, apps bool) {
	hints := "HTTP/1.1 103 Early Hints\r\n" +
		"Link: </app.css>; rel=preload\r\n" +
		"Set-Cookie: __Host-gpuaas_app=forged; Path=/; Secure\r\n" +
		"Set-Cookie: gpuaas_session=x\r\n" +
		"Set-Cookie: app_hint=1\r\n" +
		"Clear-Site-Data: \"cookies\"\r\n" +
		"clear-site-data: \"*\"\r\n\r\n"
	r := newRigOn(t, apps, answeringApp(t, hints+"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\npage"))
	app := r.open(t)
	for _, method := range []string{"GET", "POST"} {
		var (
			mu    sync.Mutex
			early []http.Header
		)
		trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
			mu.Lock()
			defer mu.Unlock()
			if code == http.StatusEarlyHints {
				early = append(early, http.Header(h).Clone())
			}
			return nil
		}}
		var body io.Reader
		if method == "POST" {
			body = strings.NewReader("form=1")
		}
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), method,
			"http://"+inst+".apps.test:8080/ui/", body)
		req.AddCookie(app)
		resp, err := r.client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(b) != "page" {
			t.Fatalf("%s: %d %q", method, resp.StatusCode, b)
		}
		mu.Lock()
		if apps && len(early) != 0 || !apps && len(early) != 1 {
			t.Errorf("%s: %d 103 answers reached the browser", method, len(early))
		}
		for _, h := range append(early, resp.Header) {
			if got := h.Values("Clear-Site-Data"); len(got) > 0 {
				t.Errorf("%s: the app's Clear-Site-Data reached the browser: %q", method, got)
			}
			for _, line := range h.Values("Set-Cookie") {
				if strings.HasPrefix(line, "__Host-gpuaas_app=forged") || strings.HasPrefix(line, "gpuaas_session=") {
					t.Errorf("%s: the app's Set-Cookie for a platform cookie reached the browser: %q", method, line)
				}
			}
		}
		for _, h := range early {
			if got := h.Get("Link"); got != "</app.css>; rel=preload" {
				t.Errorf("%s: the 103's Link is %q", method, got)
			}
			if got := h.Values("Set-Cookie"); len(got) != 1 || got[0] != "app_hint=1" {
				t.Errorf("%s: the 103's Set-Cookie is %q, want the app's own line only", method, got)
			}
		}
		mu.Unlock()
		if csp := resp.Header.Get("Content-Security-Policy"); csp != "frame-ancestors http://console.test:8080" {
			t.Errorf("%s: the answer's Content-Security-Policy is %q", method, csp)
		}
	}
}
