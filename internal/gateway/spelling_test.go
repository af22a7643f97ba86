package gateway

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

// TestGatewayDropsForwardingHeadersSpeltWithUnderscores: a CGI, FastCGI
// or WSGI server reads X_Forwarded_For as X-Forwarded-For (both are
// HTTP_X_FORWARDED_FOR) and joins their values, so a browser's
// X_Forwarded_For would say where the request came from as much as its
// X-Forwarded-For; neither listener lets one through. An app's own header
// with an underscore in its name goes on.
func TestGatewayDropsForwardingHeadersSpeltWithUnderscores(t *testing.T) {
	onBothListeners(t, testDropsUnderscoredForwarding)
}

func testDropsUnderscoredForwarding(t *testing.T, apps bool) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var seen []string
		for k, v := range r.Header {
			seen = append(seen, k+": "+strings.Join(v, ", "))
		}
		slices.Sort(seen)
		io.WriteString(w, strings.Join(seen, "\n")+"\n")
	}))
	t.Cleanup(up.Close)
	r := newRigOn(t, apps, up.Listener.Addr().String())
	app := r.open(t)
	req, _ := http.NewRequest("GET", "http://"+inst+".apps.test:8080/ui/x", nil)
	req.AddCookie(app)
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
		t.Fatalf("proxied: %d %s", resp.StatusCode, body)
	}
	if strings.Contains(string(body), "spoofed") {
		t.Errorf("a forwarding header spelt with '_' reached the app:\n%s", body)
	}
	for _, want := range []string{"X-Forwarded-For: 127.0.0.1", "X-Forwarded-Host: " + inst + ".apps.test:8080",
		"X-Forwarded-Proto: http", "X_app_key: kept"} {
		if !strings.Contains(string(body), want+"\n") {
			t.Errorf("the app did not get %q:\n%s", want, body)
		}
	}
}

// TestForwardingHeader: the name check both listeners share takes '_'
// for '-' and ignores case, and nothing more.
func TestForwardingHeader(t *testing.T) {
	for name, want := range map[string]bool{
		"X-Forwarded-For": true, "x-forwarded-for": true, "X_Forwarded_For": true, "X-Forwarded_Host": true,
		"X_FORWARDED_PROTO": true, "X_Forwarded_Prefix": true, "X-Forwarded-Ssl": true,
		"Forwarded": true, "forwarded": true, "X-Real-Ip": true, "X_Real_Ip": true, "x-real_ip": true,
		"X-Forwarded-": false, "X_Forwarded_": false, "X-Forwarded": false, "X.Forwarded.For": false,
		"X-ForwardedFor": false, "XForwarded-For": false, "X-Real-Ips": false, "X_App_Key": false,
		"Forwarded_": false, "": false,
	} {
		if got := forwardingHeader(name); got != want {
			t.Errorf("forwardingHeader(%q) = %v, want %v", name, got, want)
		}
	}
}

// TestGatewayDropsClearSiteData: an app's Clear-Site-Data would have the
// browser clear the cookies of the whole registrable domain (the
// console's, every other app's); sessions and cookies are the gateway's,
// so neither listener passes it on, however its name is cased. The rest
// of the answer goes on.
func TestGatewayDropsClearSiteData(t *testing.T) { onBothListeners(t, testDropsClearSiteData) }

func testDropsClearSiteData(t *testing.T, apps bool) {
	answer := "HTTP/1.1 200 OK\r\n" +
		"Clear-Site-Data: \"cookies\", \"storage\"\r\n" +
		"clear-site-data: \"*\"\r\n" +
		"CLEAR-SITE-DATA: \"cache\"\r\n" +
		"Set-Cookie: app_state=; Max-Age=0\r\n" +
		"X-App: kept\r\n" +
		"Content-Length: 2\r\n\r\nok"
	addr, _ := rawApp(t, func(c net.Conn, br *bufio.Reader) {
		for readRequest(t, br) {
			io.WriteString(c, answer)
		}
	})
	r := newRigOn(t, apps, addr)
	app := r.open(t)
	resp, body := r.get(t, "/", app, nil)
	if resp.StatusCode != http.StatusOK || body != "ok" {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	if got := resp.Header.Values("Clear-Site-Data"); len(got) > 0 {
		t.Errorf("the app's Clear-Site-Data reached the browser: %q", got)
	}
	if got := resp.Header.Get("X-App"); got != "kept" {
		t.Errorf("X-App %q", got)
	}
	if got := resp.Header.Values("Set-Cookie"); len(got) != 1 || got[0] != "app_state=; Max-Age=0" {
		t.Errorf("the app's own cookie-clearing line did not pass: %q", got)
	}
}
