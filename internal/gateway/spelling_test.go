package gateway

import (
	"net/http"
	"testing"
)

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
	r := newRigOn(t, apps, answeringApp(t, answer))
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
