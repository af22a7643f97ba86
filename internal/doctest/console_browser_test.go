package doctest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	cdruntime "github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/coder/websocket"
)

// The web console and the UI gateway as a person uses them: the real
// binary (gpuaas dev), the example app built into a real image and run by
// the real Docker engine, and a real Chromium driven over the DevTools
// protocol. Screenshots of each step go to $GPUAAS_SCREENSHOTS (or the
// test's artifact dir).

// shipScript publishes the example app as version $1 the way the
// quickstart does (build, push signed, verify, promote, register, publish)
// and entitles the dev project to it. $2 renames the app (default my-app);
// $3 replaces its metering kind. The first run signs in and creates the
// publisher's service account and signing key.
const shipScript = `
CREDS=.gpuaas/dev-credentials.json
export GPUAAS_API_URL="$(jq -er .api_url "$CREDS")" GPUAAS_PROJECT_ID="$(jq -er .project_id "$CREDS")"
REGISTRY="${GPUAAS_API_URL#http://}"
V="$1" APP="${2:-my-app}" METERING="${3:-}"
if [ ! -f publisher.json ]; then
  jq -er .admin_password "$CREDS" | gpuaas login --email "$(jq -er .admin_email "$CREDS")" --password-stdin
  gpuaas sa create --name publisher --slug publisher --key-file publisher.json >/dev/null
  gpuaas sa token --key-file publisher.json >/dev/null
  gpuaas artifact keygen --out cosign
  gpuaas artifact signing-key add --name ci --public-key-file cosign.pub >/dev/null
fi
(cd examples/my-app && CGO_ENABLED=0 go build -ldflags "-X main.version=$V" -o my-app . && docker build -q -t "$IMAGE:$APP-$V" . >/dev/null)
art="$(gpuaas artifact push "$IMAGE:$APP-$V" --app "$APP" --version "$V" --sign-key cosign.key --as publisher -o json)"
ref="$REGISTRY/$(jq -er '.repository + "@" + .digest' <<<"$art")"
gpuaas artifact verify "$APP/$V/runtime" --reason check >/dev/null
for s in staged canary active; do gpuaas artifact promote "$APP/$V/runtime" --to "$s" --reason rollout >/dev/null; done
set -- --set version="$V" --set image_ref="$ref" --set app.slug="$APP"
if [ -n "$METERING" ]; then set -- "$@" --set version.metering.kind="$METERING"; fi
gpuaas manifest register examples/my-app/my-app.yaml "$@" >/dev/null
gpuaas app publish "$APP" "$V" --reason doc-test >/dev/null
gpuaas app entitle "$APP" --mode tenant_dedicated --scope project >/dev/null
echo "shipped $APP $V"
`

// otherTenantScript makes a second tenant: its own org, project and
// person, who must see nothing of the first.
const otherTenantScript = `
CREDS=.gpuaas/dev-credentials.json
export GPUAAS_API_URL="$(jq -er .api_url "$CREDS")"
gpuaas org create --slug other-org --name "Other org" -o json > other-org.json
gpuaas project create --org other-org --slug other --name Other -o json > other-project.json
TOKEN="$(jq -er .access_token < <(curl -fsS "$GPUAAS_API_URL/api/v1/auth/login" -H 'Content-Type: application/json' \
  -d "$(jq -n --arg e "$(jq -er .admin_email "$CREDS")" --arg p "$(jq -er .admin_password "$CREDS")" '{email: $e, password: $p}')"))"
curl -fsS "$GPUAAS_API_URL/api/v1/users" -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
  -d '{"email": "other@example.com", "password": "other-password-123"}' > other-user.json
curl -fsS "$GPUAAS_API_URL/api/v1/projects/$(jq -er .id other-project.json)/members" -H "Authorization: Bearer $TOKEN" \
  -H 'Content-Type: application/json' -d "$(jq -n --arg u "$(jq -er .id other-user.json)" '{user_id: $u, role: "project_admin"}')" >/dev/null
echo "other tenant ready"
`

type devCreds struct {
	APIURL        string `json:"api_url"`
	ProjectID     string `json:"project_id"`
	AdminEmail    string `json:"admin_email"`
	AdminPassword string `json:"admin_password"`
}

func screenshotDir(t *testing.T) string {
	if d := os.Getenv("GPUAAS_SCREENSHOTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.ArtifactDir()
}

// chromium finds the browser, or skips loudly (fails on CI).
func chromium(t testing.TB) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	missing(t, "no Chromium (apt-get install chromium)")
	return ""
}

func TestConsoleInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("builds gpuaas and a Docker image, drives Chromium")
	}
	requireTools(t)
	browser := chromium(t)
	work, env := devWithExampleApp(t, "gpuaas-browsertest")
	out := runBash(t, work, env, shipScript, "1.0.0")
	out += runBash(t, work, env, otherTenantScript)
	if !strings.Contains(out, "shipped my-app 1.0.0") || !strings.Contains(out, "other tenant ready") {
		t.Fatalf("setup:\n%s", out)
	}
	var creds devCreds
	b, err := os.ReadFile(filepath.Join(work, ".gpuaas", "dev-credentials.json"))
	if err != nil || json.Unmarshal(b, &creds) != nil {
		t.Fatalf("dev credentials: %v", err)
	}
	base := creds.APIURL
	shots := screenshotDir(t)

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser), chromedp.NoSandbox,
		chromedp.WindowSize(1280, 900), chromedp.Flag("headless", "new"))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	if err := chromedp.Run(ctx); err != nil { // starts the browser
		t.Fatalf("start Chromium: %v", err)
	}

	step := 0
	shot := func(name string) chromedp.Action {
		return chromedp.ActionFunc(func(ctx context.Context) error {
			step++
			var png []byte
			if err := chromedp.FullScreenshot(&png, 100).Do(ctx); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(shots, fmt.Sprintf("%02d-%s.png", step, name)), png, 0o644)
		})
	}
	run := func(what string, actions ...chromedp.Action) {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		defer cancel()
		if err := chromedp.Run(sctx, actions...); err != nil {
			var loc, body string
			_ = chromedp.Run(ctx, chromedp.Location(&loc), chromedp.Text("body", &body, chromedp.ByQuery))
			_ = chromedp.Run(ctx, shot("failed"))
			t.Fatalf("%s: %v\nat %s:\n%s", what, err, loc, body)
		}
	}

	// Sign in, choose the dev project, open the catalog.
	run("sign in",
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible("#login", chromedp.ByQuery),
		shot("sign-in"),
		chromedp.SendKeys(`input[name=email]`, creds.AdminEmail, chromedp.ByQuery),
		chromedp.SendKeys(`input[name=password]`, creds.AdminPassword, chromedp.ByQuery),
		chromedp.Submit("#login", chromedp.ByQuery),
		chromedp.WaitVisible(".cards", chromedp.ByQuery),
		shot("projects"),
	)
	run("choose the project",
		chromedp.Click(`form:has(input[value="`+creds.ProjectID+`"]) button`, chromedp.ByQuery),
		chromedp.WaitVisible("#instances, .empty", chromedp.ByQuery),
		chromedp.Navigate(base+"/catalog"),
		chromedp.WaitVisible(`a.pill`, chromedp.ByQuery),
		shot("catalog"),
		chromedp.Click(`a.pill`, chromedp.ByQuery),
		chromedp.WaitVisible("#launch-form", chromedp.ByQuery),
	)
	// The wizard: a value outside the GPU bounds shows its error next to
	// the field; good values show the effective launch.
	var fieldErr string
	run("launch with a bad value",
		chromedp.SetValue(`input[name="resources.gpu_count"]`, "9", chromedp.ByQuery),
		chromedp.Click("#launch", chromedp.ByQuery),
		chromedp.WaitVisible(`[data-pointer="/resources/gpu_count"] .field-error`, chromedp.ByQuery),
		chromedp.Text(`[data-pointer="/resources/gpu_count"] .field-error`, &fieldErr, chromedp.ByQuery),
		shot("wizard-field-error"),
	)
	if !strings.Contains(fieldErr, "9") && !strings.Contains(strings.ToLower(fieldErr), "gpu") {
		t.Errorf("the GPU field's error does not explain itself: %q", fieldErr)
	}
	var effective string
	run("preview good values",
		chromedp.SetValue(`input[name="resources.gpu_count"]`, "0", chromedp.ByQuery),
		chromedp.SetValue(`input[name="display_name"]`, "browser-walk", chromedp.ByQuery),
		chromedp.Click("#preview", chromedp.ByQuery),
		chromedp.WaitVisible("#effective", chromedp.ByQuery),
		chromedp.Text("#effective pre", &effective, chromedp.ByQuery),
		shot("wizard-effective"),
	)
	if !strings.Contains(effective, `"gpu_count": 0`) || !strings.Contains(effective, "tenant_dedicated") {
		t.Errorf("effective values: %s", effective)
	}
	// Launch; the instance page turns running without a reload: a marker
	// set on the page survives until the state shows running.
	var state, instanceURL string
	run("launch",
		chromedp.Click("#launch", chromedp.ByQuery),
		chromedp.WaitVisible("#instance-state", chromedp.ByQuery),
		chromedp.Location(&instanceURL),
		chromedp.Evaluate(`window.__noReload = "still-here"`, nil),
		shot("instance-requested"),
		waitText("#instance-state", "running", 2*time.Minute),
		chromedp.Text("#instance-state", &state, chromedp.ByQuery),
		shot("instance-running"),
	)
	var marker string
	run("no reload", chromedp.Evaluate(`window.__noReload || ""`, &marker))
	if marker != "still-here" {
		t.Fatalf("the page reloaded to show the new state (marker %q)", marker)
	}
	id := regexp.MustCompile(`/workloads/instance/([0-9a-f-]+)`).FindStringSubmatch(instanceURL)
	if id == nil {
		t.Fatalf("instance URL %s", instanceURL)
	}
	instanceID := id[1]

	// Open app: through the gateway, on the instance's own origin, the
	// app's page; its WebSocket echo works.
	var openHref, appURL, echoed, headersJSON string
	run("open the app",
		chromedp.WaitVisible("#open-app", chromedp.ByQuery),
		chromedp.AttributeValue("#open-app", "href", &openHref, nil, chromedp.ByQuery),
	)
	run("app page and WebSocket",
		chromedp.Navigate(base+openHref),
		chromedp.WaitVisible("#title", chromedp.ByQuery),
		chromedp.Location(&appURL),
		chromedp.WaitVisible(`body[data-ws="open"]`, chromedp.ByQuery),
		chromedp.SetValue("#msg", "hello through the gateway", chromedp.ByQuery),
		chromedp.Click("#send", chromedp.ByQuery),
		waitText("#echo", "hello through the gateway", 20*time.Second),
		chromedp.Text("#echo", &echoed, chromedp.ByQuery),
		shot("app-through-gateway"),
	)
	u, _ := url.Parse(appURL)
	if !strings.HasPrefix(u.Host, instanceID+".apps.localhost") || u.Path != "/ui/" || u.RawQuery != "" {
		t.Errorf("the app opened at %s; want its own origin %s.apps.localhost, path /ui/, the code stripped", appURL, instanceID)
	}
	// What the app received: no platform cookie or token.
	run("headers the app saw",
		chromedp.Navigate(u.Scheme+"://"+u.Host+"/ui/headers"),
		chromedp.Text("body", &headersJSON, chromedp.ByQuery),
	)
	for _, leak := range []string{"gpuaas_session", "__Host-gpuaas_app", "Authorization"} {
		if strings.Contains(headersJSON, leak) {
			t.Errorf("the app received %s: %s", leak, headersJSON)
		}
	}

	t.Run("security", func(t *testing.T) {
		securityChecks(t, base, instanceID, creds)
	})

	// Decommission from the page; the state arrives live.
	run("decommission",
		chromedp.Navigate(base+"/workloads/instance/"+instanceID),
		chromedp.WaitVisible("#decommission", chromedp.ByQuery),
		// The form posts and the browser lands on the instance page again
		// (a new document: the old one is tagged to tell them apart).
		chromedp.Evaluate(`document.documentElement.dataset.old = "1"`, nil),
		chromedp.Click("#confirm-decommission", chromedp.ByQuery),
		chromedp.Click("#decommission", chromedp.ByQuery),
		chromedp.WaitVisible(`html:not([data-old]) #live[data-stream="open"]`, chromedp.ByQuery),
		chromedp.Evaluate(`window.__noReload = "after-post"`, nil),
		waitText("#instance-state", "decommissioned", 2*time.Minute),
		shot("decommissioned"),
	)
	run("no reload after decommission", chromedp.Evaluate(`window.__noReload || ""`, &marker))
	if marker != "after-post" {
		t.Errorf("decommissioned arrived by a reload, not live (marker %q)", marker)
	}
	if out, _ := exec.Command("docker", "ps", "-aq", "--filter", "label=gpuaas.instance_id="+instanceID).Output(); len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("containers left after decommission: %s", out)
	}
	t.Logf("screenshots in %s", shots)
}

// waitText polls the page (in the browser, no reload) until sel's text is
// want.
func waitText(sel, want string, within time.Duration) chromedp.Action {
	return chromedp.ActionFunc(func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, within)
		defer cancel()
		js := fmt.Sprintf(`new Promise(function (ok) {
  function check() { var e = document.querySelector(%q); if (e && e.textContent.trim() === %q) { ok(true); } else { setTimeout(check, 50); } }
  check();
})`, sel, want)
		var done bool
		return chromedp.Evaluate(js, &done, func(p *cdruntime.EvaluateParams) *cdruntime.EvaluateParams { return p.WithAwaitPromise(true) }).Do(ctx)
	})
}

// gatewayClient reaches <anything>.localhost:port on loopback (the
// console's host, the port asked for), as browsers do, and does not follow
// redirects.
func gatewayClient(base string) *http.Client {
	u, _ := url.Parse(base)
	return &http.Client{
		Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			_, port, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			return (&net.Dialer{}).DialContext(ctx, network, net.JoinHostPort(u.Hostname(), port))
		}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       30 * time.Second,
	}
}

// consoleLogin signs in through the console's form as a browser would and
// returns the session cookie and the CSRF token of its pages.
func consoleLogin(t testing.TB, hc *http.Client, base, email, password string) (session, csrf string) {
	t.Helper()
	resp, err := hc.Get(base + "/login")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	loginCSRF := regexp.MustCompile(`name="csrf_token" value="([^"]+)"`).FindStringSubmatch(string(page))
	var loginCookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "gpuaas_login_csrf" {
			loginCookie = c
		}
	}
	if loginCSRF == nil || loginCookie == nil {
		t.Fatalf("sign-in page without CSRF token:\n%s", page)
	}
	req, _ := http.NewRequest("POST", base+"/login", strings.NewReader(url.Values{"email": {email}, "password": {password},
		"csrf_token": {loginCSRF[1]}, "next": {"/projects"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(loginCookie)
	resp, err = hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for _, c := range resp.Cookies() {
		if c.Name == "gpuaas_session" {
			session = c.Value
			if !c.HttpOnly || c.SameSite != http.SameSiteLaxMode || c.Domain != "" {
				t.Errorf("session cookie is not host-only HttpOnly SameSite=Lax: %+v", c)
			}
		}
	}
	if resp.StatusCode != http.StatusSeeOther || session == "" {
		t.Fatalf("sign-in as %s: %d, no session", email, resp.StatusCode)
	}
	body := get(t, hc, base+"/projects", session)
	m := regexp.MustCompile(`name="csrf_token" value="([^"]+)"`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no CSRF token on the projects page:\n%s", body)
	}
	return session, m[1]
}

func get(t testing.TB, hc *http.Client, u, session string) string {
	t.Helper()
	_, body := getStatus(t, hc, u, session)
	return body
}

func getStatus(t testing.TB, hc *http.Client, u, session string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", u, nil)
	req.Header.Set("Accept", "text/html")
	if session != "" {
		req.AddCookie(&http.Cookie{Name: "gpuaas_session", Value: session})
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func postForm(t *testing.T, hc *http.Client, u, session string, form url.Values) int {
	t.Helper()
	req, _ := http.NewRequest("POST", u, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(&http.Cookie{Name: "gpuaas_session", Value: session})
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// openCode asks the console for the instance's gateway link as the
// session's person and returns the link.
func openLink(t testing.TB, hc *http.Client, base, instanceID, session string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/workloads/instance/"+instanceID+"/open", nil)
	req.AddCookie(&http.Cookie{Name: "gpuaas_session", Value: session})
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Location")
}

// redeem follows a gateway link and returns the app cookie it sets.
func redeem(t testing.TB, hc *http.Client, link string) (int, *http.Cookie) {
	t.Helper()
	resp, err := hc.Get(link)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for _, c := range resp.Cookies() {
		if c.Name == "__Host-gpuaas_app" {
			return resp.StatusCode, c
		}
	}
	return resp.StatusCode, nil
}

func securityChecks(t *testing.T, base, instanceID string, creds devCreds) {
	hc := gatewayClient(base)
	admin, adminCSRF := consoleLogin(t, hc, base, creds.AdminEmail, creds.AdminPassword)
	other, otherCSRF := consoleLogin(t, hc, base, "other@example.com", "other-password-123")
	// The app's origin, as the console's links name it: gpuaas dev serves
	// app origins on an apps listener of their own.
	_, first := openLink(t, hc, base, instanceID, admin)
	firstURL, _ := url.Parse(first)
	appOrigin := "http://" + firstURL.Host
	if pub, _ := url.Parse(base); !strings.HasPrefix(firstURL.Host, instanceID+".apps.localhost:") || firstURL.Port() == pub.Port() {
		t.Fatalf("open link %q: not on the instance's own origin on gpuaas dev's apps listener (the console is at %s)", first, base)
	}
	t.Logf("the app's origin: %s (console: %s)", appOrigin, base)

	t.Run("another tenant's person gets not found", func(t *testing.T) {
		for _, p := range []string{"/workloads/instance/" + instanceID, "/workloads/instance/" + instanceID + "/open"} {
			if code, body := getStatus(t, hc, base+p, other); code != http.StatusNotFound || strings.Contains(body, "browser-walk") {
				t.Errorf("GET %s as another tenant: %d", p, code)
			}
		}
		if code := postForm(t, hc, base+"/workloads/instance/"+instanceID+"/decommission", other,
			url.Values{"csrf_token": {otherCSRF}, "confirm": {"yes"}}); code != http.StatusNotFound {
			t.Errorf("decommission as another tenant: %d", code)
		}
		// The gateway, without its cookie: sent to the console, which
		// answers not found for this person.
		code, body := getStatus(t, hc, appOrigin+"/ui/", "")
		if code != http.StatusSeeOther {
			t.Errorf("gateway without an app token: %d %s", code, body)
		}
	})

	t.Run("the app sees no platform credential; its own pass", func(t *testing.T) {
		code, link := openLink(t, hc, base, instanceID, admin)
		if code != http.StatusSeeOther || !strings.HasPrefix(link, appOrigin+"/__gpuaas/open?") {
			t.Fatalf("open: %d %q", code, link)
		}
		code, app := redeem(t, hc, link)
		if code != http.StatusSeeOther || app == nil || !app.Secure || !app.HttpOnly || app.Domain != "" || app.Path != "/" {
			t.Fatalf("redeem: %d, cookie %+v", code, app)
		}
		platformToken := adminToken(t, base, creds)
		req, _ := http.NewRequest("GET", appOrigin+"/ui/headers", nil)
		req.Header.Set("Cookie", "__Host-gpuaas_app="+app.Value+"; gpuaas_session="+admin+"; app_pref=dark")
		req.Header.Set("Authorization", "Bearer "+platformToken)
		seen := headersSeen(t, hc, req)
		if got := seen.Get("Cookie"); got != "app_pref=dark" {
			t.Errorf("the app got Cookie %q; want only its own app_pref=dark", got)
		}
		if got := seen.Get("Authorization"); got != "" {
			t.Errorf("a platform token reached the app: %q", got)
		}
		req.Header.Set("Authorization", "Bearer sk-app-own-key")
		if got := headersSeen(t, hc, req).Get("Authorization"); got != "Bearer sk-app-own-key" {
			t.Errorf("the app's own bearer key did not pass: %q", got)
		}
		// The code was used once: a replay is refused.
		if code, c := redeem(t, hc, link); code != http.StatusNotFound || c != nil {
			t.Errorf("replayed code: %d %v", code, c)
		}
		// WebSockets: the app's origin passes, a foreign one does not.
		h := http.Header{"Cookie": {"__Host-gpuaas_app=" + app.Value}}
		ws, _, err := websocket.Dial(context.Background(), "ws://"+firstURL.Host+"/ui/echo",
			&websocket.DialOptions{HTTPClient: hc, HTTPHeader: withOrigin(h, appOrigin)})
		if err != nil {
			t.Fatalf("WebSocket from the app's origin: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := ws.Write(ctx, websocket.MessageText, []byte("ping")); err != nil {
			t.Fatal(err)
		}
		if _, msg, err := ws.Read(ctx); err != nil || string(msg) != "ping" {
			t.Errorf("echo: %q %v", msg, err)
		}
		ws.CloseNow()
		_, resp, err := websocket.Dial(context.Background(), "ws://"+firstURL.Host+"/ui/echo",
			&websocket.DialOptions{HTTPClient: hc, HTTPHeader: withOrigin(h, "http://evil.example")})
		if err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
			t.Errorf("WebSocket from a foreign origin was not refused with 403: %v %v", err, resp)
		}
		// Another tenant's app cookie is not minted at all: its person
		// gets no link.
		if code, _ := openLink(t, hc, base, instanceID, other); code != http.StatusNotFound {
			t.Errorf("open as another tenant: %d", code)
		}
	})

	t.Run("a form without its CSRF token is refused", func(t *testing.T) {
		if code := postForm(t, hc, base+"/workloads/instance/"+instanceID+"/decommission", admin, url.Values{"confirm": {"yes"}}); code != http.StatusForbidden {
			t.Errorf("decommission without CSRF token: %d", code)
		}
		if code := postForm(t, hc, base+"/workloads/instance/"+instanceID+"/decommission", admin,
			url.Values{"confirm": {"yes"}, "csrf_token": {adminCSRF + "x"}}); code != http.StatusForbidden {
			t.Errorf("decommission with a wrong CSRF token: %d", code)
		}
		if !strings.Contains(get(t, hc, base+"/workloads/instance/"+instanceID, admin), `id="instance-state">running<`) {
			t.Error("a refused form changed the instance")
		}
	})

	t.Run("a signed-out session cannot be reused", func(t *testing.T) {
		s, csrf := consoleLogin(t, hc, base, creds.AdminEmail, creds.AdminPassword)
		if code := postForm(t, hc, base+"/logout", s, url.Values{"csrf_token": {csrf}}); code != http.StatusSeeOther {
			t.Fatalf("sign out: %d", code)
		}
		code, _ := getStatus(t, hc, base+"/workloads", s)
		if code != http.StatusSeeOther {
			t.Errorf("a signed-out session still opens pages: %d", code)
		}
		if code, _ := openLink(t, hc, base, instanceID, s); code != http.StatusSeeOther {
			t.Errorf("a signed-out session still opens apps: %d", code)
		}
	})
}

func withOrigin(h http.Header, origin string) http.Header {
	out := h.Clone()
	out.Set("Origin", origin)
	return out
}

func headersSeen(t *testing.T, hc *http.Client, req *http.Request) http.Header {
	t.Helper()
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var seen struct {
		Headers http.Header `json:"headers"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&seen) != nil {
		t.Fatalf("headers echo: %d", resp.StatusCode)
	}
	return seen.Headers
}

func adminToken(t testing.TB, base string, creds devCreds) string {
	t.Helper()
	b, _ := json.Marshal(map[string]string{"email": creds.AdminEmail, "password": creds.AdminPassword})
	resp, err := http.Post(base+"/api/v1/auth/login", "application/json", strings.NewReader(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&tok); err != nil || tok.AccessToken == "" {
		t.Fatalf("admin login: %v", err)
	}
	return tok.AccessToken
}
