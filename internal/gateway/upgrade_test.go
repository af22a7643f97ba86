package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// TestGatewaySwitchesToWebSocketsOnly: an upgrade to another protocol
// than WebSocket is not switched to, whatever the app would agree to: the
// gateway watches a WebSocket's access (watchUpgrade) and no other
// connection, so such a tunnel would outlive a revoked role. The request
// reaches the app as a plain one.
func TestGatewaySwitchesToWebSocketsOnly(t *testing.T) {
	onBothListeners(t, testSwitchesToWebSocketsOnly)
}

func testSwitchesToWebSocketsOnly(t *testing.T, apps bool) {
	addr, _ := rawApp(t, func(c net.Conn, br *bufio.Reader) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, req.Body)
			// An app that switches to whatever it is asked for.
			if up := req.Header.Get("Upgrade"); up != "" {
				fmt.Fprintf(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: %s\r\nConnection: Upgrade\r\n\r\ntunnel", up)
				return
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nplain")
		}
	})
	r := newRigOn(t, apps, addr)
	app := r.open(t)
	for _, proto := range []string{"tcp", "h2c", "websocket2"} {
		c := r.dial(t)
		fmt.Fprintf(c, "GET /ui/x HTTP/1.1\r\nHost: %s.apps.test:8080\r\nUpgrade: %s\r\nConnection: Upgrade\r\n"+
			"Origin: http://%s.apps.test:8080\r\nCookie: __Host-gpuaas_app=%s\r\n\r\n", inst, proto, inst, app.Value)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64))
		resp.Body.Close()
		c.Close()
		if resp.StatusCode != http.StatusOK || string(body) != "plain" || strings.EqualFold(resp.Header.Get("Connection"), "upgrade") {
			t.Errorf("Upgrade: %s: %d %q, want the app's plain answer", proto, resp.StatusCode, body)
		}
	}
}

// TestGatewayWebSocketOriginIsExactlyTheAppsOwn: an upgrade whose Origin
// is anything but the instance's own origin (none, an opaque one, another
// instance's, the same host with a trailing dot, another scheme or port,
// the console's) is refused before it reaches the app.
func TestGatewayWebSocketOriginIsExactlyTheAppsOwn(t *testing.T) {
	onBothListeners(t, testWebSocketOriginIsExactlyTheAppsOwn)
}

func testWebSocketOriginIsExactlyTheAppsOwn(t *testing.T, apps bool) {
	addr, reached := rawApp(t, func(net.Conn, *bufio.Reader) {})
	r := newRigOn(t, apps, addr)
	app := r.open(t)
	for _, origin := range []string{"", "null", "http://0193aaaa-bbbb-7ccc-8ddd-000000000001.apps.test:8080",
		"http://" + inst + ".apps.test.:8080", "http://" + inst + ".apps.test", "https://" + inst + ".apps.test:8080",
		"http://" + inst + ".apps.test:8081", "http://console.test:8080", "http://x" + inst + ".apps.test:8080"} {
		c := r.dial(t)
		head := "GET /ui/echo HTTP/1.1\r\nHost: " + inst + ".apps.test:8080\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
			"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nCookie: __Host-gpuaas_app=" + app.Value + "\r\n"
		if origin != "" {
			head += "Origin: " + origin + "\r\n"
		}
		io.WriteString(c, head+"\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		c.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("Origin %q: %d, want 403", origin, resp.StatusCode)
		}
	}
	if n := reached.Load(); n != 0 {
		t.Errorf("%d refused upgrades reached the app", n)
	}
}
