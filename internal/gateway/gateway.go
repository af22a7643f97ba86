// Package gateway is the platform's UI gateway: a reverse proxy that puts a
// running instance's own web UI on its own origin
// (https://<instance-id>.<apps domain>/) behind the platform's sign-in, so an
// app never runs a user session of its own.
//
// The gateway owns authentication on that origin: a one-time code from the
// console is traded for a short-lived app token in a host-only cookie, and
// every request must carry it. What reaches the app is the person's request
// without any platform credential: the gateway's cookie and the console's
// session cookie are taken out, an Authorization header that is a platform
// token is dropped, and the app's own cookies and bearer keys pass untouched.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/gpuaas/gpuaas/internal/clock"
	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/events"
	"github.com/gpuaas/gpuaas/internal/instances"
	"github.com/gpuaas/gpuaas/internal/redirect"
	"github.com/gpuaas/gpuaas/internal/wakeup"
)

// Backend is what the gateway asks of the instances domain.
type Backend interface {
	RedeemUI(ctx context.Context, code, instanceID string) (instances.UIGrant, error)
	// RecheckUI says whether the person of a grant the gateway holds may
	// still open that instance's UI now (RedeemUI's checks, without the
	// code): nil yes, a NotFound-kind error no, any other error unknown.
	RecheckUI(ctx context.Context, grant instances.UIGrant) error
	UIUpstreamOf(ctx context.Context, instanceID string) (instances.UIUpstream, error)
}

// Config sets a gateway up.
type Config struct {
	// Domain is the apps domain: instance UIs live at <id>.<Domain>.
	// gpuaas dev uses apps.localhost, which browsers resolve to loopback.
	Domain string
	// PathMode also serves UIs at /apps/instances/<id>/ui/ on the console's
	// own origin. Off by default: there the app shares the console's
	// origin (docs/console.md).
	PathMode bool
	// PublicURL is the console's base URL (scheme and port of app origins,
	// the only origin allowed to frame an app).
	PublicURL func() string
	// AppsPort, when it answers, is the port of app origins in the links
	// the gateway makes, where browsers reach an apps listener straight
	// (gpuaas dev); "" or nil: the public URL's port.
	AppsPort func() string
	// Key signs app tokens (HMAC-SHA256); every replica needs the same.
	Key []byte
	// TokenTTL is an app token's lifetime: how long access outlives a
	// revoked role at most. Default 5 minutes. A token past half of it is
	// renewed on use once Backend.RecheckUI allows (authorize), and a
	// WebSocket is re-checked each time its token would end.
	TokenTTL time.Duration
	// IsPlatformToken says whether a bearer token is one the platform
	// issued; such a header never reaches an app.
	IsPlatformToken func(ctx context.Context, token string) bool
	// StripCookies are further cookie names never forwarded (the console's
	// session cookie).
	StripCookies []string
	Backend      Backend
	Logger       *slog.Logger
	Now          func() time.Time
	// ReadTimeout and WriteTimeout are the server's (--read-timeout,
	// --write-timeout). The server's own deadlines bound a whole request,
	// which would cut an app's event stream or slow answer short; for a
	// proxied request the gateway moves them instead, so each bounds one
	// wait for the browser (for more of the body, or to take more of the
	// answer) and the wait for the app is the app's. 0: none.
	ReadTimeout, WriteTimeout time.Duration
	// Transport reaches the instances (default: upstreamTransport, GETs
	// in the calling goroutine and the rest through a pooled
	// http.Transport).
	Transport http.RoundTripper
	// Wake, when set, makes the gateway forget every instance address it
	// remembers at each notice of wakeup.InstanceOperations (a request to
	// decommission, upgrade or roll back an instance committed, on any
	// replica): an instance being torn down stops being proxied to at
	// once, before its node can hand its port to another instance,
	// rather than up to upstreamCacheTTL later.
	Wake *wakeup.Hub
}

// Gateway serves instance UIs.
type Gateway struct {
	cfg   Config
	proxy *httputil.ReverseProxy
	mu    sync.Mutex
	cache map[string]cachedUpstream
	// epoch counts forgetUpstreams: an address read before a forget is
	// not remembered after it.
	epoch uint64
	// verified remembers tokens whose signature checked out, until they
	// expire: a page with fifty assets is fifty requests with one token,
	// and the HMAC and JSON decoding were a tenth of the gateway's cost.
	verified     sync.Map // token -> *verifiedToken
	nVerified    atomic.Int64
	parsedPublic atomic.Pointer[parsedURL]
}

type cachedUpstream struct {
	up      instances.UIUpstream
	err     error
	expires time.Time
}

// upstreamCacheTTL bounds how stale the gateway's view of an instance's
// address and state may be.
const upstreamCacheTTL = 2 * time.Second

// OpenPath is the gateway path that redeems a one-time code.
const OpenPath = "/__gpuaas/open"

// New builds a gateway.
func New(cfg Config) *Gateway {
	if cfg.TokenTTL <= 0 {
		cfg.TokenTTL = 5 * time.Minute
	}
	cfg.Now = clock.Or(cfg.Now)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.Domain = strings.ToLower(strings.Trim(cfg.Domain, "."))
	if cfg.Transport == nil {
		dial := (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext
		cfg.Transport = newUpstreamTransport(&http.Transport{
			Proxy:               nil,
			DialContext:         dial,
			MaxIdleConns:        1024,
			MaxIdleConnsPerHost: 256,
			IdleConnTimeout:     90 * time.Second,
		}, dial, cfg.Now)
	}
	g := &Gateway{cfg: cfg, cache: map[string]cachedUpstream{}}
	if cfg.Wake != nil {
		cfg.Wake.OnNotify(wakeup.InstanceOperations, g.forgetUpstreams)
	}
	g.proxy = &httputil.ReverseProxy{
		Rewrite:        g.rewrite,
		Transport:      cfg.Transport,
		BufferPool:     bufferPool{},
		ModifyResponse: g.modifyResponse,
		// The proxy's own notes (a body copy cut short: a browser gone, a
		// stream whose access ended) go to the gateway's log, not stderr.
		ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelInfo),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if p, _ := r.Context().Value(upstreamKey{}).(proxied); p.body != nil {
				if berr := p.body.failed(r.Context()); berr != nil {
					// The browser's side failed, as on the apps listener.
					g.cfg.Logger.InfoContext(r.Context(), "ui gateway: a request body stopped coming", "err", berr, "host", r.Host)
					g.page(w, http.StatusRequestTimeout, "The upload stopped", "The rest of the request did not arrive in time. Try again.", "")
					return
				}
			}
			g.cfg.Logger.WarnContext(r.Context(), "ui gateway: upstream failed", "err", err, "host", r.Host)
			g.page(w, http.StatusBadGateway, "The app did not answer",
				"The instance is running but its UI did not answer ("+err.Error()+"). Try again in a moment, or look at its logs in the console.", "")
		},
	}
	return g
}

// Enabled reports whether the gateway serves anything.
func (g *Gateway) Enabled() bool { return g != nil && g.cfg.Domain != "" }

// target is the instance a request is for and the path prefix its UI is
// mounted at ("" on the instance's own origin).
type target struct {
	instanceID string
	prefix     string
	origin     string // scheme://host[:port] the browser sees
}

// match decides whether r is for an instance UI.
func (g *Gateway) match(r *http.Request) (target, bool) {
	if t, ok := g.matchHost(r.Host); ok {
		return t, true
	}
	if g.Enabled() && g.cfg.PathMode {
		if rest, ok := strings.CutPrefix(r.URL.Path, "/apps/instances/"); ok {
			id, _, _ := strings.Cut(rest, "/")
			if id != "" && strings.HasPrefix(r.URL.Path, PathBase(id)+"/") {
				return target{instanceID: id, prefix: PathBase(id), origin: g.scheme() + "://" + r.Host}, true
			}
		}
	}
	return target{}, false
}

// matchHost decides whether a request's Host is an instance's own origin.
func (g *Gateway) matchHost(hostport string) (target, bool) {
	if !g.Enabled() {
		return target{}, false
	}
	host := strings.ToLower(hostport)
	if h, port, err := net.SplitHostPort(host); err == nil {
		if !portNumber(port) {
			return target{}, false
		}
		host = h
	}
	// The Host header is the browser's (or anyone's) to write, and what
	// matches becomes the instance id looked up and the origin the gateway
	// redirects to and checks WebSocket Origins against: only a DNS label
	// (what an instance id is) under the apps domain is one.
	if label, ok := strings.CutSuffix(host, "."+g.cfg.Domain); ok && dnsLabel(label) {
		return target{instanceID: label, origin: g.scheme() + "://" + strings.ToLower(hostport)}, true
	}
	return target{}, false
}

// dnsLabel reports whether s is one DNS label: 1 to 63 lower-case letters,
// digits and hyphens, neither first nor last a hyphen.
func dnsLabel(s string) bool {
	if len(s) == 0 || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// portNumber reports whether s is a port: 1 to 5 digits.
func portNumber(s string) bool {
	if len(s) == 0 || len(s) > 5 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func (g *Gateway) scheme() string {
	if u, err := g.publicURL(); err == nil && u.Scheme == "https" {
		return "https"
	}
	return "http"
}

// publicURL is cfg.PublicURL parsed, remembered while the string is the
// same: every proxied request asks for its scheme and origin.
func (g *Gateway) publicURL() (*url.URL, error) {
	s := g.cfg.PublicURL()
	if p := g.parsedPublic.Load(); p != nil && p.raw == s {
		return p.u, p.err
	}
	u, err := url.Parse(s)
	g.parsedPublic.Store(&parsedURL{raw: s, u: u, err: err})
	return u, err
}

type parsedURL struct {
	raw string
	u   *url.URL
	err error
}

// PathBase is the path an instance's UI is served under on the console's
// origin in path mode.
func PathBase(instanceID string) string { return "/apps/instances/" + instanceID + "/ui" }

// OpenURL is the link that redeems code for instanceID and lands on path.
func (g *Gateway) OpenURL(instanceID, path, code string) string {
	pub, err := url.Parse(g.cfg.PublicURL())
	if err != nil {
		return ""
	}
	q := url.Values{"code": {code}, "path": {path}}
	if g.cfg.PathMode {
		return strings.TrimSuffix(g.cfg.PublicURL(), "/") + PathBase(instanceID) + OpenPath + "?" + q.Encode()
	}
	host := instanceID + "." + g.cfg.Domain
	p := pub.Port()
	if g.cfg.AppsPort != nil && g.cfg.AppsPort() != "" {
		p = g.cfg.AppsPort()
	}
	if p != "" {
		host = net.JoinHostPort(host, p)
	}
	return (&url.URL{Scheme: g.scheme(), Host: host, Path: OpenPath, RawQuery: q.Encode()}).String()
}

// Wrap serves instance UIs and hands every other request to next.
func (g *Gateway) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t, ok := g.match(r)
		if !ok && g.underDomain(r.Host) {
			// Another name under the apps domain (two labels deep, the
			// domain itself, a trailing dot) is no app's origin, and the
			// console is not served there: it would share its site with
			// every app.
			g.page(w, http.StatusNotFound, "Not found", "This address serves app UIs only, at <instance-id>."+g.cfg.Domain+".", "")
			return
		}
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		g.serve(w, r, t)
	})
}

// underDomain says whether a Host header names the apps domain or a name
// under it, in any case, with a port or a trailing dot.
func (g *Gateway) underDomain(hostport string) bool {
	if !g.Enabled() {
		return false
	}
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	return host == g.cfg.Domain || strings.HasSuffix(host, "."+g.cfg.Domain)
}

func (g *Gateway) serve(w http.ResponseWriter, r *http.Request, t target) {
	w.Header().Set("Content-Security-Policy", "frame-ancestors "+g.consoleOrigin())
	path := strings.TrimPrefix(r.URL.Path, t.prefix)
	if path == OpenPath {
		g.open(w, r, t)
		return
	}
	claims, fresh, err := g.verify(r, t)
	if err != nil {
		g.signIn(w, r, t, path)
		return
	}
	if why := foreign(r.Method, r.Header.Get("Sec-Fetch-Site"), r.Header.Get("Sec-Fetch-Mode"),
		r.Header.Get("Sec-Fetch-Dest"), r.Header.Get("Origin"), t.origin); why != "" {
		// Before the renewed token is set: a refusal sets no cookie.
		g.page(w, http.StatusForbidden, "Not sent to the app", why, "")
		return
	}
	if fresh != nil {
		http.SetCookie(w, fresh)
	}
	up, err := g.upstream(r.Context(), t.instanceID)
	if err == nil && up.Embedded && up.InstanceID == claims.Instance && up.ContainerPort != claims.Port {
		// The token is for a UI port the instance no longer serves its UI
		// on (an upgrade moved it): it opens nothing, and the person opens
		// the app again through the console.
		g.signIn(w, r, t, path)
		return
	}
	if !admitted(up, claims, err) {
		g.refuse(w, r, up, claims, err)
		return
	}
	if r.Header.Get("Upgrade") != "" && !isWebSocket(r) {
		// Only a WebSocket is switched to: its Origin is checked and its
		// connection watched (watchUpgrade). The proxy would switch to any
		// protocol the app agrees to, and such a connection would outlive
		// the person's access; the request goes on as a plain one.
		r.Header.Del("Upgrade")
	}
	if isWebSocket(r) {
		if o := r.Header.Get("Origin"); !strings.EqualFold(o, t.origin) {
			http.Error(w, "the WebSocket's Origin is not this app's origin", http.StatusForbidden)
			return
		}
	}
	if isWebSocket(r) {
		// The proxy closes the upgraded connection when its request's
		// context ends.
		ctx, stop := g.watchUpgrade(r.Context(), claims)
		defer stop()
		r = r.WithContext(ctx)
	} else { // a hijacked connection has no deadlines
		w, r = g.perWait(w, r)
	}
	body, _ := r.Body.(*movingBody)
	r = r.WithContext(context.WithValue(r.Context(), upstreamKey{}, proxied{up: up, prefix: t.prefix, body: body, claims: claims}))
	g.proxy.ServeHTTP(g.earlyWriter(w), r)
}

// admitted says whether a request whose app token carries claims may reach
// the instance as resolved (up, err): the one decision both listeners
// proxy on. A token is for one instance and the port its UI was on.
func admitted(up instances.UIUpstream, claims appClaims, err error) bool {
	return err == nil && up.Embedded && up.InstanceID == claims.Instance && up.ContainerPort == claims.Port && up.Addr != ""
}

// foreign decides whether a request for an app, from a browser that holds
// the person's app token for it, was sent by a page the app must not
// answer to: it says why in words a person reads, or "" when the request
// goes on. Both listeners decide on it (the apps listener's fast path
// hands what it refuses to the net/http gateway, which refuses it here,
// after checking the token): method and the Sec-Fetch-Site,
// Sec-Fetch-Mode, Sec-Fetch-Dest and Origin headers as the browser sent
// them, and own, the app's origin.
//
// Two rules refuse: crossOrigin (a change sent from another origin's
// page) and crossSiteResource (anything but a navigation, asked for by
// another origin's page). A WebSocket's Origin is checked besides, where
// the upgrade is handled.
func foreign(method, site, mode, dest, origin, own string) string {
	if crossOrigin(method, site, origin, own) {
		return "This request to the app came from a page of another site, so it was not sent on. Use the app from its own pages."
	}
	if crossSiteResource(method, site, mode, dest) {
		return "A page of another site (another app under this domain, perhaps) asked for this app's data, scripts or images, " +
			"so the request was not sent on: an app answers its own pages only. Open the app itself to use it."
	}
	return ""
}

// crossSiteResource says whether a request is a resource that a page of
// another origin asked for in the background (a fetch or XHR, with CORS
// or without, an image, a script, a style sheet, a frame's <object> or
// <embed>), by the browser's fetch metadata: such a request is not sent on
// (a resource isolation policy, as web.dev's "Protect your resources from
// web attacks with Fetch Metadata" describes). Every app's origin is the
// same site as every other under the apps domain, so the browser sends the
// app cookie with a request another tenant's app makes: an app that
// answers CORS with the caller's Origin and credentials allowed (as dev
// servers do), or JSON a <script> can include, would hand the person's
// data in it to that app's page. GETs are refused here too, which
// crossOrigin lets go on.
//
// What goes on: a request without Sec-Fetch-Site (a browser too old to
// send it; a client that is no browser, such as curl or an SDK with the
// app's own key, which holds no app cookie to misuse), one from the app's
// own pages ("same-origin") or from the person ("none": typed, a
// bookmark), and a navigation (GET or HEAD, mode "navigate") into a
// window or frame: Open app and the one-time link's redirects, a frame of
// the console's (frame-ancestors lets it frame the app), a link from
// elsewhere. A navigation into an <object> or
// <embed> is a resource of the page that holds it, and refused.
func crossSiteResource(method, site, mode, dest string) bool {
	switch site {
	case "", "same-origin", "none":
		return false
	}
	if mode == "navigate" && (method == http.MethodGet || method == http.MethodHead) {
		return dest == "object" || dest == "embed"
	}
	return true // same-site, cross-site, or a value unknown here
}

// crossOrigin says whether a request that may change something (any
// method but GET, HEAD and OPTIONS) was sent by a page of another origin
// than the app's own (own): such a request is not sent on. SameSite=Lax
// keeps the app cookie from other sites, but every instance's origin, and
// any other host under the same registrable domain, is the same site: a
// page of another tenant's app could post a form to this one, and the
// browser would send the app cookie with it. An app behind the gateway
// runs no sign-in of its own, so the gateway is what stops it, as it stops
// another origin's WebSocket. A browser says where a request came from in
// Sec-Fetch-Site ("same-origin", or "none" for what the person did);
// without it, an Origin other than own gives it away. A request with
// neither (no browser sent it) goes on.
func crossOrigin(method, fetchSite, origin, own string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	switch fetchSite {
	case "same-origin", "none":
		return false
	case "":
		return origin != "" && !strings.EqualFold(origin, own)
	default: // same-site, cross-site, or a value unknown here
		return true
	}
}

// refuse answers a request admitted refused, with why.
func (g *Gateway) refuse(w http.ResponseWriter, r *http.Request, up instances.UIUpstream, claims appClaims, err error) {
	var e *errdefs.Error
	switch {
	case errors.As(err, &e) && e.Kind == errdefs.KindNotFound, err == nil && (!up.Embedded || up.InstanceID != claims.Instance):
		g.page(w, http.StatusNotFound, "Not found", "There is no app UI here, or you may not open it.", "")
	case err != nil:
		g.cfg.Logger.ErrorContext(r.Context(), "ui gateway: resolve instance", "err", err)
		g.page(w, http.StatusServiceUnavailable, "Try again", "The platform could not look the instance up just now. Reload in a few seconds.", "")
	default: // not running: no address
		msg := fmt.Sprintf("This instance is %s, so its UI is not available.", up.Status)
		if up.ReasonMessage != "" {
			msg += " " + up.ReasonMessage
		}
		w.Header().Set("Retry-After", "5")
		g.page(w, http.StatusServiceUnavailable, "The app is not running", msg+" Its page in the console shows what to do next.",
			g.consoleURL("/workloads/instance/"+up.InstanceID))
	}
}

// bufferPool reuses the proxy's copy buffers: without it every proxied
// request allocates 32 KiB, and in a server with a large live heap the
// garbage collector's work for that allocation rate outweighs the proxying.
type bufferPool struct{}

var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (bufferPool) Get() []byte  { return *copyBuffers.Get().(*[]byte) }
func (bufferPool) Put(b []byte) { copyBuffers.Put(&b) }

type upstreamKey struct{}

// proxied rides in a proxied request's context, for rewrite and the
// proxy's ErrorHandler (which sees the body only behind the proxy's own
// wrapper).
type proxied struct {
	up     instances.UIUpstream
	prefix string
	body   *movingBody // nil without a body
	claims appClaims   // of the app token the request came with
}

func isWebSocket(r *http.Request) bool {
	return strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
}

// open redeems a one-time code: the app token goes into the origin's
// cookie and the browser is sent on without the code in its address.
func (g *Gateway) open(w http.ResponseWriter, r *http.Request, t target) {
	code := r.URL.Query().Get("code")
	grant, err := g.cfg.Backend.RedeemUI(r.Context(), code, t.instanceID)
	if err != nil {
		var e *errdefs.Error
		if errors.As(err, &e) && e.Kind == errdefs.KindNotFound {
			g.page(w, http.StatusNotFound, "This link has expired", e.Message, g.consoleURL("/workloads/instance/"+t.instanceID))
			return
		}
		g.cfg.Logger.ErrorContext(r.Context(), "ui gateway: redeem", "err", err)
		g.page(w, http.StatusServiceUnavailable, "Try again", "The platform could not check this link just now.", "")
		return
	}
	tok, _, err := g.sign(grant)
	if err != nil {
		g.page(w, http.StatusInternalServerError, "Try again", "The platform could not sign you in to the app.", "")
		return
	}
	http.SetCookie(w, g.cookie(t, tok, int(g.cfg.TokenTTL.Seconds())))
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Referrer-Policy", "no-referrer")
	http.Redirect(w, r, t.prefix+redirect.Local(r.URL.Query().Get("path")), http.StatusSeeOther)
}

// signIn answers a request without a valid app token: a page load goes
// through the console (sign in there, then come back with a fresh code);
// anything else gets a plain 401.
func (g *Gateway) signIn(w http.ResponseWriter, r *http.Request, t target, path string) {
	if r.Method != http.MethodGet || isWebSocket(r) || !strings.Contains(r.Header.Get("Accept"), "text/html") {
		w.Header().Set("Cache-Control", "no-store")
		http.Error(w, "sign in through the platform console to use this app", http.StatusUnauthorized)
		return
	}
	next := path
	if r.URL.RawQuery != "" {
		next += "?" + r.URL.RawQuery
	}
	http.Redirect(w, r, g.consoleURL("/workloads/instance/"+url.PathEscape(t.instanceID)+"/open?"+url.Values{"path": {next}}.Encode()), http.StatusSeeOther)
}

func (g *Gateway) consoleOrigin() string {
	u, err := g.publicURL()
	if err != nil {
		return "'none'"
	}
	return u.Scheme + "://" + u.Host
}

func (g *Gateway) consoleURL(path string) string {
	return strings.TrimSuffix(g.cfg.PublicURL(), "/") + path
}

// upstream resolves an instance's UI address, cached briefly: the gateway
// sits on every request of an app's UI.
func (g *Gateway) upstream(ctx context.Context, id string) (instances.UIUpstream, error) {
	now := g.cfg.Now()
	g.mu.Lock()
	c, ok := g.cache[id]
	epoch := g.epoch
	g.mu.Unlock()
	if ok && now.Before(c.expires) {
		return c.up, c.err
	}
	up, err := g.cfg.Backend.UIUpstreamOf(ctx, id)
	var e *errdefs.Error
	if err == nil || (errors.As(err, &e) && e.Kind == errdefs.KindNotFound) {
		g.mu.Lock()
		if len(g.cache) > 10000 {
			clear(g.cache)
		}
		if g.epoch == epoch {
			g.cache[id] = cachedUpstream{up: up, err: err, expires: now.Add(upstreamCacheTTL)}
		}
		g.mu.Unlock()
	}
	return up, err
}

// forgetUpstreams drops every remembered instance address and state: the
// next request for each reads it again.
func (g *Gateway) forgetUpstreams() {
	g.mu.Lock()
	defer g.mu.Unlock()
	clear(g.cache)
	g.epoch++
}

var pageTmpl = template.Must(template.New("page").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Title}} · gpuaas</title>
<style>body{font:16px system-ui,sans-serif;max-width:40rem;margin:4rem auto;padding:0 1rem;color:#1d2433}a{color:#2356d8}</style></head>
<body><h1>{{.Title}}</h1><p>{{.Message}}</p>{{if .Link}}<p><a href="{{.Link}}">Open the console</a></p>{{end}}</body></html>`))

// page answers with a short page a person can act on.
func (g *Gateway) page(w http.ResponseWriter, status int, title, msg, link string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = pageTmpl.Execute(w, map[string]string{"Title": title, "Message": msg, "Link": link})
}

// appClaims is an app token: one person, one instance, one UI port, and
// the org and project the person reads the instance through (for the
// re-check; a token without them reads through the instance's own).
type appClaims struct {
	jwt.RegisteredClaims
	Instance string `json:"inst"`
	Port     int    `json:"port"`
	Org      string `json:"org,omitempty"`
	Project  string `json:"proj,omitempty"`
}

// grant is what the token proves, to re-check.
func (c appClaims) grant() instances.UIGrant {
	return instances.UIGrant{UserID: c.Subject, OrgID: c.Org, ProjectID: c.Project, InstanceID: c.Instance, Port: c.Port}
}

// halfway is when the token has lived half its lifetime: from then on a
// request that carries it has the grant re-checked and gets a fresh one.
func (c appClaims) halfway(ttl time.Duration) time.Time {
	exp := c.ExpiresAt.Time
	if c.IssuedAt == nil {
		return exp.Add(-ttl / 2)
	}
	return c.IssuedAt.Add(exp.Sub(c.IssuedAt.Time) / 2)
}

const tokenAudience = "gpuaas-ui-gateway"

// sign makes an app token for gr, living TokenTTL from now.
func (g *Gateway) sign(gr instances.UIGrant) (string, appClaims, error) {
	now := g.cfg.Now()
	c := appClaims{RegisteredClaims: jwt.RegisteredClaims{Subject: gr.UserID, Audience: jwt.ClaimStrings{tokenAudience},
		IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(g.cfg.TokenTTL))},
		Instance: gr.InstanceID, Port: gr.Port, Org: gr.OrgID, Project: gr.ProjectID}
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(g.cfg.Key)
	return tok, c, err
}

var (
	errNoToken = errors.New("no app token")
	errRevoked = errors.New("the app token's grant was re-checked and refused")
)

// verify is authorize for a request's cookie.
func (g *Gateway) verify(r *http.Request, t target) (appClaims, *http.Cookie, error) {
	ck, err := r.Cookie(g.cookieName(t))
	if err != nil {
		return appClaims{}, nil, errNoToken
	}
	return g.authorize(r.Context(), ck.Value, t)
}

// verifiedToken is an app token whose signature checked out, and what its
// re-check (past half its lifetime) found. Nothing here outlives the
// token, nor what a re-check allowed: a fresh token lives TokenTTL from
// the re-check that allowed it.
type verifiedToken struct {
	claims appClaims

	mu      sync.Mutex // held while the grant is re-checked: one check per token
	refused bool       // the re-check refused: the token opens nothing more
	fresh   string     // the token the re-check allowed
	freshC  appClaims
}

// authorize decides on an app token for instance t, the one decision both
// listeners make: a token that does not verify is an error. One past half
// its lifetime has its grant re-checked (Backend.RecheckUI), once: allowed,
// the answer carries the returned cookie, a fresh token for the same grant
// (the claims returned are the fresh token's); refused, the token is as
// good as none (errRevoked) from then on. A re-check that cannot tell
// leaves the token as it is, to be re-checked on its next use. Tokens not
// yet halfway, nearly every request, cost no re-check.
func (g *Gateway) authorize(ctx context.Context, value string, t target) (appClaims, *http.Cookie, error) {
	v, err := g.verifyToken(value, t)
	if err != nil {
		return appClaims{}, nil, err
	}
	now := g.cfg.Now()
	if now.Before(v.claims.halfway(g.cfg.TokenTTL)) {
		return v.claims, nil, nil
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.refused {
		return appClaims{}, nil, errRevoked
	}
	if v.fresh == "" {
		err := g.cfg.Backend.RecheckUI(ctx, v.claims.grant())
		var e *errdefs.Error
		switch {
		case errors.As(err, &e) && e.Kind == errdefs.KindNotFound:
			g.cfg.Logger.InfoContext(ctx, "ui gateway: access to an app ended", "user", v.claims.Subject, "instance", v.claims.Instance, "reason", e.Code)
			v.refused = true
			return appClaims{}, nil, errRevoked
		case err != nil:
			g.cfg.Logger.WarnContext(ctx, "ui gateway: could not re-check an app token; it stands until it ends", "err", err, "instance", v.claims.Instance)
			return v.claims, nil, nil
		}
		tok, c, err := g.sign(v.claims.grant())
		if err != nil {
			return v.claims, nil, nil
		}
		v.fresh, v.freshC = tok, c
	}
	// The cookie lives as long as the fresh token (whose end is in whole
	// seconds).
	return v.freshC, g.cookie(t, v.fresh, max(0, int(math.Ceil(v.freshC.ExpiresAt.Sub(now).Seconds())))), nil
}

// verifyToken checks an app token's signature and lifetime, for instance t.
func (g *Gateway) verifyToken(value string, t target) (*verifiedToken, error) {
	if value == "" {
		return nil, errNoToken
	}
	if e, ok := g.verified.Load(value); ok {
		v := e.(*verifiedToken)
		if g.cfg.Now().Before(v.claims.ExpiresAt.Time) && v.claims.Instance == t.instanceID {
			return v, nil
		}
		if !g.cfg.Now().Before(v.claims.ExpiresAt.Time) {
			g.verified.Delete(value)
		}
		return nil, errNoToken
	}
	var c appClaims
	_, err := jwt.ParseWithClaims(value, &c, func(*jwt.Token) (any, error) { return g.cfg.Key, nil },
		jwt.WithValidMethods([]string{"HS256"}), jwt.WithAudience(tokenAudience), jwt.WithExpirationRequired(),
		jwt.WithTimeFunc(g.cfg.Now))
	if err != nil {
		return nil, err
	}
	if g.nVerified.Add(1) > 100_000 {
		g.verified.Clear()
		g.nVerified.Store(0)
	}
	e, _ := g.verified.LoadOrStore(value, &verifiedToken{claims: c})
	if c.Instance != t.instanceID {
		return nil, errNoToken
	}
	return e.(*verifiedToken), nil
}

// watchUpgrade gives a proxied WebSocket a context that ends when the app
// token it was opened with (claims) would have ended, unless
// Backend.RecheckUI allows the grant at that moment; then it is re-checked
// one TTL later, and so on. A refusal, or a re-check that cannot tell,
// ends it: the reverse proxy closes the app's side of the upgraded
// connection when its request's context ends, and then the browser's. The
// times are the gateway's clock (Config.Now); the timer waits for the
// difference, and looks again should the clock say it is early.
func (g *Gateway) watchUpgrade(parent context.Context, claims appClaims) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	go func() {
		until := claims.ExpiresAt.Time
		timer := time.NewTimer(until.Sub(g.cfg.Now()))
		defer timer.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
			}
			now := g.cfg.Now()
			if now.Before(until) {
				timer.Reset(until.Sub(now))
				continue
			}
			if err := g.cfg.Backend.RecheckUI(ctx, claims.grant()); err != nil {
				if ctx.Err() == nil {
					g.cfg.Logger.InfoContext(ctx, "ui gateway: a WebSocket's access ended", "err", err,
						"user", claims.Subject, "instance", claims.Instance)
				}
				cancel()
				return
			}
			until = now.Add(g.cfg.TokenTTL)
			timer.Reset(g.cfg.TokenTTL)
		}
	}()
	return ctx, cancel
}

// cookieName: on an instance's own origin the cookie is __Host- (host-only,
// Secure, Path=/: no other origin can set or read it). Browsers treat
// http://*.localhost as secure, so gpuaas dev gets the same cookie. In path
// mode the origin is shared, so the name carries the instance.
func (g *Gateway) cookieName(t target) string {
	if t.prefix != "" {
		return "gpuaas_app_" + t.instanceID
	}
	return "__Host-gpuaas_app"
}

func (g *Gateway) cookie(t target, value string, maxAge int) *http.Cookie {
	c := &http.Cookie{Name: g.cookieName(t), Value: value, Path: "/", HttpOnly: true, Secure: true,
		SameSite: http.SameSiteLaxMode, MaxAge: maxAge}
	if t.prefix != "" {
		c.Path = t.prefix + "/"
		c.Secure = g.scheme() == "https"
	}
	return c
}

// ours reports whether a cookie belongs to the platform, not the app.
func (g *Gateway) ours(name string) bool {
	if name == "__Host-gpuaas_app" || strings.HasPrefix(name, "gpuaas_app_") {
		return true
	}
	for _, n := range g.cfg.StripCookies {
		if name == n {
			return true
		}
	}
	return false
}

// clearSiteData is the answer header that has a browser clear what it
// keeps for a site: its "cookies" (and "*") directive clears the cookies
// of the whole registrable domain, the console's and every app's when
// they share a parent domain. Sessions and cookies are the gateway's, so
// both listeners drop it from an app's answer: an app clears its own
// cookies with an expired Set-Cookie.
const clearSiteData = "Clear-Site-Data"

// oursSetCookie says whether a Set-Cookie line from an app would set or
// clear a platform cookie; both listeners drop such a line.
func (g *Gateway) oursSetCookie(line string) bool { return g.ours(setCookieName(line)) }

// setCookieName is the name of the cookie a Set-Cookie line sets, as a
// browser reads it (RFC 6265bis, 5.6): the text before the first '=' of
// the part before the first ';', spaces and tabs trimmed; no '=' there is
// the empty name. Not http.ParseSetCookie: it rejects lines browsers take
// (a value with a backslash or an inner quote), and a line it rejects
// would pass as no one's cookie and overwrite the platform's.
func setCookieName(line string) string {
	pair, _, _ := strings.Cut(line, ";")
	name, _, ok := strings.Cut(pair, "=")
	if !ok {
		return ""
	}
	return strings.Trim(name, " \t")
}

// wsHeaders are the WebSocket handshake headers in their RFC 6455 casing:
// Go canonicalises Sec-WebSocket-Key to Sec-Websocket-Key, and some servers
// compare names case-sensitively.
var wsHeaders = []string{"Sec-WebSocket-Key", "Sec-WebSocket-Version", "Sec-WebSocket-Protocol",
	"Sec-WebSocket-Extensions", "Sec-WebSocket-Accept"}

// canonicalWSHeaders are wsHeaders as Go keys them, computed once: this
// runs on every proxied request.
var canonicalWSHeaders = func() []string {
	c := make([]string, len(wsHeaders))
	for i, name := range wsHeaders {
		c[i] = http.CanonicalHeaderKey(name)
	}
	return c
}()

func exactWebSocketCasing(h http.Header) {
	for i, name := range wsHeaders {
		canon := canonicalWSHeaders[i]
		if v, ok := h[canon]; ok && canon != name {
			delete(h, canon)
			h[name] = v
		}
	}
}

func (g *Gateway) rewrite(pr *httputil.ProxyRequest) {
	p, _ := pr.In.Context().Value(upstreamKey{}).(proxied)
	pr.SetURL(&url.URL{Scheme: "http", Host: p.up.Addr})
	pr.Out.Host = pr.In.Host
	// Only the app's own cookies go on.
	var keep []string
	for _, c := range pr.In.Cookies() {
		if !g.ours(c.Name) {
			keep = append(keep, c.Name+"="+c.Value)
		}
	}
	pr.Out.Header.Del("Cookie")
	if len(keep) > 0 {
		pr.Out.Header.Set("Cookie", strings.Join(keep, "; "))
	}
	// A platform token never reaches the app; the app's own key does.
	// Every Authorization header is looked at, not the first only: the
	// apps listener drops each that is the platform's.
	if auth := pr.Out.Header.Values("Authorization"); len(auth) > 0 {
		pr.Out.Header.Del("Authorization")
		for _, v := range auth {
			if !g.isPlatformAuthorization(pr.In.Context(), v) {
				pr.Out.Header.Add("Authorization", v)
			}
		}
	}
	if isWebSocket(pr.In) {
		g.dropPlatformProtocols(pr.In.Context(), pr.Out.Header)
	}
	// What says where a request came from is the gateway's to say
	// (forwardingHeader): Rewrite has dropped the browser's
	// X-Forwarded-For, -Host and -Proto, and the rest go too, the prefix
	// set again in path mode.
	for k := range pr.Out.Header {
		if forwardingHeader(k) {
			delete(pr.Out.Header, k)
		}
	}
	pr.SetXForwarded()
	if pr.In.TLS == nil && g.scheme() == "https" {
		pr.Out.Header.Set("X-Forwarded-Proto", "https")
	}
	if p.prefix != "" {
		pr.Out.Header.Set("X-Forwarded-Prefix", p.prefix)
	}
	exactWebSocketCasing(pr.Out.Header)
}

// forwardingHeader says whether a request header is one a proxy writes to
// say where the request came from (Forwarded, X-Real-IP, any
// X-Forwarded-*: -For, -Host, -Proto, -Port, -Prefix, -Ssl, …). An app
// may trust these (a framework's proxy-headers setting), and a browser's
// own would lie to it: both listeners drop every one a request comes with
// and set their own. The name is read as an app's server reads it
// (sameHeaderName): X_Forwarded_For and X-Forwarded_Host are forwarding
// headers as much as X-Forwarded-For is.
func forwardingHeader(name string) bool {
	const prefix = "X-Forwarded-"
	return sameHeaderName(name, "Forwarded") || sameHeaderName(name, "X-Real-Ip") ||
		len(name) > len(prefix) && sameHeaderName(name[:len(prefix)], prefix)
}

// sameHeaderName says whether two header names are one to an app: ASCII
// case aside, and '_' the same as '-'. CGI, FastCGI and WSGI servers
// (Python's wsgiref, gunicorn before 22) turn both into '_' (X_Real_Ip and
// X-Real-IP are both HTTP_X_REAL_IP) and join the values of the names
// that meet there, so a name the gateway drops or sets must not pass in
// another spelling. Apps' own headers with '_' in their names go on.
func sameHeaderName(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range len(a) {
		if x, y := a[i], b[i]; x != y && foldHeaderByte(x) != foldHeaderByte(y) {
			return false
		}
	}
	return true
}

// foldHeaderByte is c as sameHeaderName compares it: upper case, '_' as '-'.
func foldHeaderByte(c byte) byte {
	switch {
	case c == '_':
		return '-'
	case 'a' <= c && c <= 'z':
		return c - ('a' - 'A')
	}
	return c
}

// dropPlatformProtocols takes a platform token offered as a WebSocket
// subprotocol (bearer.<token>, the way the API's event streams take one
// from a browser) out of an upgrade's offer, as an Authorization header
// holding one is dropped; the app's own subprotocols go on. (Only the
// console's listener proxies upgrades: the apps listener hands them to it.)
func (g *Gateway) dropPlatformProtocols(ctx context.Context, h http.Header) {
	offered := h.Values("Sec-Websocket-Protocol")
	var keep []string
	dropped := false
	for _, v := range offered {
		for p := range strings.SplitSeq(v, ",") {
			p = strings.TrimSpace(p)
			if tok, ok := strings.CutPrefix(p, events.WebSocketBearerPrefix); ok && g.isPlatformAuthorization(ctx, "Bearer "+tok) {
				dropped = true
			} else if p != "" {
				keep = append(keep, p)
			}
		}
	}
	if !dropped {
		return
	}
	h.Del("Sec-Websocket-Protocol")
	if len(keep) > 0 {
		h.Set("Sec-Websocket-Protocol", strings.Join(keep, ", "))
	}
}

// appAnswerHeader holds the headers of an app's answer, final
// (modifyResponse) or 1xx (earlyWriter), to one policy: the app cannot
// set or clear the platform's cookies on this origin, nor have the
// browser clear the site's data (clearSiteData).
func (g *Gateway) appAnswerHeader(h http.Header) {
	h.Del(clearSiteData)
	if sc := h.Values("Set-Cookie"); len(sc) > 0 {
		h.Del("Set-Cookie")
		for _, line := range sc {
			if !g.oursSetCookie(line) {
				h.Add("Set-Cookie", line)
			}
		}
	}
}

// earlyWriter is what the proxy answers through. The proxy writes an
// app's 1xx answers (103 Early Hints) to it from its client trace, past
// modifyResponse, so they are held to appAnswerHeader here, whichever
// transport read them. After each 1xx the proxy's trace clears the
// header map, which would drop what the gateway set before proxying
// (frame-ancestors, a renewed app cookie) from the final answer: that is
// put back before the map is used again. The proxy's trace runs under
// its own lock, taken again before it goes on, so wiped needs none.
type earlyWriter struct {
	http.ResponseWriter
	g     *Gateway
	own   http.Header // the gateway's, set before proxying
	wiped bool        // a 1xx went out and the proxy cleared the map
}

func (g *Gateway) earlyWriter(w http.ResponseWriter) *earlyWriter {
	return &earlyWriter{ResponseWriter: w, g: g, own: w.Header().Clone()}
}

func (w *earlyWriter) Header() http.Header {
	h := w.ResponseWriter.Header()
	if w.wiped {
		w.wiped = false
		for k, v := range w.own {
			h[k] = append(v[:len(v):len(v)], h[k]...)
		}
	}
	return h
}

func (w *earlyWriter) WriteHeader(code int) {
	h := w.Header()
	if code >= 100 && code < 200 && code != http.StatusSwitchingProtocols {
		w.g.appAnswerHeader(h)
		w.ResponseWriter.WriteHeader(code)
		w.wiped = true
		return
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *earlyWriter) Write(p []byte) (int, error) {
	w.Header()
	return w.ResponseWriter.Write(p)
}

func (w *earlyWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (g *Gateway) modifyResponse(res *http.Response) error {
	g.appAnswerHeader(res.Header)
	exactWebSocketCasing(res.Header)
	// An upgraded connection has its own watch (watchUpgrade); any other
	// answer's body goes on only while the access holds (access.go).
	if p, ok := res.Request.Context().Value(upstreamKey{}).(proxied); ok && res.StatusCode != http.StatusSwitchingProtocols {
		res.Body = &heldBody{heldReader: heldReader{r: res.Body, access: g.hold(p.claims)}, Closer: res.Body}
	}
	return nil
}
