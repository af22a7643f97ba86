// Package console is gpuaas's web console: server-rendered pages (no build
// step, a little hand-written JS for live updates) for what the CLI does.
//
// The console holds no business rule and checks no permission itself: every
// read and change is a call of the REST API, in process, with an access
// token minted for the signed-in person. So a page shows exactly what the
// API would answer that person, refusals included, with the same audit,
// idempotency and events. The console's own state is the browser session
// (a server-side row; the cookie is a random id) and its CSRF token.
package console

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpuaas/gpuaas/client"
	"github.com/gpuaas/gpuaas/internal/clock"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/storage"
	"github.com/gpuaas/gpuaas/internal/wakeup"
)

//go:embed templates/*.html static/*
var assets embed.FS

// The console's cookies: SessionCookie the session (host-only,
// HttpOnly), loginCSRFCookie the sign-in form's CSRF token (there is no
// session yet to hold it). Behind https their names carry the __Host-
// prefix (cookie): a browser then takes them from this very host only,
// so an app's UI on a sibling subdomain of the same site
// (<id>.apps.example.com beside console.example.com) cannot plant a session
// or a sign-in token of its choosing on the console (cookie tossing), and
// the console reads no other name. Over plain http the prefix, which needs
// Secure, is left off.
const (
	SessionCookie   = "gpuaas_session"
	loginCSRFCookie = "gpuaas_login_csrf"
	hostOnly        = "__Host-"
)

// Cookies are every name a console cookie goes by: the gateway keeps them
// from apps (in path mode an app shares the console's origin).
var Cookies = []string{SessionCookie, hostOnly + SessionCookie, loginCSRFCookie, hostOnly + loginCSRFCookie}

// cookie is a console cookie named for the scheme the console is served
// on: Secure with the __Host- prefix and path / behind https; plainly
// named, with path, over http.
func (c *Console) cookie(base, path string) *http.Cookie {
	if c.secure() {
		return &http.Cookie{Name: hostOnly + base, Path: "/", Secure: true, HttpOnly: true}
	}
	return &http.Cookie{Name: base, Path: path, HttpOnly: true}
}

// ConsoleSession is one signed-in browser of the web console. IDHash is the
// SHA-256 of the cookie's value; the value itself is never stored.
type ConsoleSession struct {
	IDHash     string
	UserID     string
	CSRFToken  string
	ProjectID  string // the project the person works in
	CreatedAt  time.Time
	LastSeenAt time.Time
	ExpiresAt  time.Time // absolute end
	EndedAt    time.Time // zero while the session lives
}

// Sessions is the storage the console's sessions live in.
type Sessions interface {
	InsertConsoleSession(ctx context.Context, s ConsoleSession) error
	GetConsoleSession(ctx context.Context, idHash string) (ConsoleSession, error)
	TouchConsoleSession(ctx context.Context, idHash string, at time.Time) error
	SetConsoleSessionProject(ctx context.Context, idHash, projectID string) error
	EndConsoleSession(ctx context.Context, idHash string, at time.Time) error
}

// Config wires a console.
type Config struct {
	// API is the REST API's handler; the console calls it in process.
	API      http.Handler
	Sessions Sessions
	// Mint issues an access token for a person, for the console's calls.
	Mint func(ctx context.Context, userID string) (token string, expires time.Time, err error)
	// Account loads a person's account: a session lives only while its
	// account is active and its tokens were not cut after the sign-in
	// (disabled, password changed).
	Account func(ctx context.Context, userID string) (iam.User, error)
	// Wake carries a session's end to the event streams the console relays,
	// on every replica (wakeup.ConsoleSessionEnded: one topic for all
	// sessions, as the hub keeps a waiter per topic until it is notified);
	// nil: they notice at their next look (sessionRecheck).
	Wake *wakeup.Hub
	// Grants loads a person's role grants (to show only the buttons their
	// roles allow; the API still decides).
	Grants func(ctx context.Context, userID string) (*iam.Grants, error)
	// ProjectOf finds an instance's project, so links by instance id work
	// whatever project the session is in (the API still checks access).
	ProjectOf func(ctx context.Context, instanceID string) (string, error)
	// AttachedTo lists the projects a shared instance is attached to, so a
	// link to it opens through whichever of them the person reads (the
	// API still decides); nil: only the project the session is in is
	// tried besides the home project.
	AttachedTo func(ctx context.Context, instanceID string) ([]iam.Scope, error)
	// StreamHead is the event stream's newest position. A page that updates
	// live reads it before the state it shows, and its stream starts after
	// it: a change made between the page's render and its stream's opening
	// still arrives (from "now" at the opening, it would be lost, and the
	// page would stay stale). Nil: streams start at their opening.
	StreamHead func(ctx context.Context) (int64, error)
	// PublicURL is the server's base URL: https there makes cookies Secure.
	PublicURL func() string
	// IdleTimeout ends a session nobody used for this long; MaxAge ends
	// every session this long after sign-in.
	IdleTimeout, MaxAge time.Duration
	Logger              *slog.Logger
	Now                 func() time.Time
}

// Console serves the pages.
type Console struct {
	cfg    Config
	pages  map[string]*template.Template
	tokens sync.Map // session id hash -> mintedToken
	// swept is when tokens last dropped the expired tokens of sessions
	// nobody came back to (Unix nanoseconds, by the console's clock).
	swept atomic.Int64
	mux   *http.ServeMux
}

type mintedToken struct {
	token   string
	expires time.Time
}

// New builds a console.
func New(cfg Config) (*Console, error) {
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 30 * time.Minute
	}
	if cfg.MaxAge <= 0 {
		cfg.MaxAge = 12 * time.Hour
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.Now = clock.Or(cfg.Now)
	c := &Console{cfg: cfg, pages: map[string]*template.Template{}}
	if err := c.parse(); err != nil {
		return nil, err
	}
	c.routes()
	return c, nil
}

func (c *Console) parse() error {
	layout, err := template.New("layout.html").Funcs(funcs).ParseFS(assets, "templates/layout.html")
	if err != nil {
		return err
	}
	names, err := fs.Glob(assets, "templates/*.html")
	if err != nil {
		return err
	}
	for _, n := range names {
		name := strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")
		if name == "layout" {
			continue
		}
		t, err := template.Must(layout.Clone()).ParseFS(assets, n)
		if err != nil {
			return err
		}
		c.pages[name] = t
	}
	return nil
}

// maxBodyBytes is the most a request to the console may carry. The API's
// routes cap their bodies in its middleware; the console is served from
// the API's fallback, past it, so it caps its own (ServeHTTP): anyone may
// post the sign-in form. Its forms are small: the largest real one, a
// launch form, is a few KiB (the Jupyter example's 32 extra packages of at
// most 256 characters each come to under 25 KiB even percent-encoded).
const maxBodyBytes = 64 << 10

// ServeHTTP serves the console. Every answer (page, asset, fragment,
// stream, download) says nosniff: a browser must not read a CSV export or
// an error as HTML or script.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if c.limitBody(w, r) {
		c.mux.ServeHTTP(w, r)
	}
}

// limitBody holds a request's body to maxBodyBytes, and refuses a
// multipart one (the console's forms send no files; Go's form parsing
// would spool a multipart body's file parts to disk). A form body is
// parsed here, so one past the cap is refused before any handler runs
// rather than read as an empty form. It reports whether to go on.
func (c *Console) limitBody(w http.ResponseWriter, r *http.Request) bool {
	// The media type is what comes before any ";", so this prefix is
	// mime.ParseMediaType's answer, and holds for a header it cannot parse.
	if strings.HasPrefix(strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Type"))), "multipart/") {
		c.refuseBody(w, r, http.StatusUnsupportedMediaType, "Not accepted",
			"The console's forms send no files: a multipart/form-data request is refused.")
		return false
	}
	if r.Body == nil || r.Body == http.NoBody {
		return true
	}
	if r.ContentLength > maxBodyBytes {
		c.refuseBody(w, r, http.StatusRequestEntityTooLarge, "Too large", tooLarge)
		return false
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxBodyBytes)
	var over *http.MaxBytesError
	if err := r.ParseForm(); errors.As(err, &over) {
		c.refuseBody(w, r, http.StatusRequestEntityTooLarge, "Too large", tooLarge)
		return false
	}
	return true
}

var tooLarge = "This request carries more than the console's forms ever send (" + strconv.Itoa(maxBodyBytes>>10) + " KiB); it is refused."

// refuseBody answers a request refused for its body with a page saying
// why, and closes the connection (the rest of the body is not read).
func (c *Console) refuseBody(w http.ResponseWriter, r *http.Request, status int, title, why string) {
	w.Header().Set("Connection", "close")
	c.render(w, r, status, "error", page{Title: title, Flash: why})
}

// page is what every page template gets.
type page struct {
	Title   string
	Session *sessionView
	Flash   string
	Error   *client.APIError
	Data    any
	Path    string
	// After is where a live page's stream starts (liveAfter): the event
	// position its state is as of. Empty: at the stream's opening.
	After string
	// formToAnyOrigin lets the page's forms lead to another origin: a form
	// whose answer redirects there (the app's origin, for "Open app") is
	// held to form-action by the browser, redirect included.
	formToAnyOrigin bool
}

type sessionView struct {
	Email       string
	UserID      string
	CSRF        string
	ProjectID   string
	Project     *client.Project
	Projects    []projectChoice
	IsAdmin     bool
	grants      *iam.Grants
	orgOfActive string
}

type projectChoice struct {
	ID, Label string
	Selected  bool
}

// Can reports whether the person's roles allow perm in the current project.
func (s *sessionView) Can(perm string) bool {
	if s == nil || s.grants == nil {
		return false
	}
	return s.grants.Can(perm, iam.Scope{OrgID: s.orgOfActive, ProjectID: s.ProjectID})
}

// liveAfter is the event position a live page's state is as of: call it
// before reading that state. Empty when unknown; the page's stream then
// starts at its opening. A fragment (the page's refresh) needs none: the
// script takes only its content, and its stream is already open.
func (c *Console) liveAfter(r *http.Request) string {
	if c.cfg.StreamHead == nil || r.URL.Query().Get("fragment") != "" {
		return ""
	}
	n, err := c.cfg.StreamHead(r.Context())
	if err != nil {
		c.cfg.Logger.WarnContext(r.Context(), "console: the event stream's position is unknown; the page's live updates start when its stream opens", "err", err)
		return ""
	}
	return strconv.FormatInt(n, 10)
}

// render writes a page with status.
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, name string, p page) {
	t, ok := c.pages[name]
	if !ok {
		http.Error(w, "no page "+name, http.StatusInternalServerError)
		return
	}
	p.Path = r.URL.Path
	securityHeaders(w)
	if p.formToAnyOrigin {
		w.Header().Set("Content-Security-Policy", strings.Replace(w.Header().Get("Content-Security-Policy"), "form-action 'self'", "form-action 'self' http: https:", 1))
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	tmpl := "layout.html"
	if r.URL.Query().Get("fragment") != "" {
		tmpl = "content"
	}
	if err := t.ExecuteTemplate(w, tmpl, p); err != nil {
		c.cfg.Logger.ErrorContext(r.Context(), "console: render", "page", name, "err", err)
	}
}

// securityHeaders: the console frames only itself and loads only its own
// scripts.
func securityHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-src http: https:; frame-ancestors 'self'; form-action 'self'")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
}

func (c *Console) secure() bool {
	u, err := url.Parse(c.cfg.PublicURL())
	return err == nil && u.Scheme == "https"
}

func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

func hashID(id string) string {
	s := sha256.Sum256([]byte(id))
	return hex.EncodeToString(s[:])
}

// apiClient calls the API in process as the person of a session.
func (c *Console) apiClient(r *http.Request, token string) *client.Client {
	cl := client.New("http://console.internal", token)
	cl.UserAgent = "gpuaas-console"
	cl.HTTP = &http.Client{Transport: inProcess{h: c.cfg.API, remote: r.RemoteAddr, fwd: r.Header.Get("X-Forwarded-For")}}
	return cl
}

// inProcess is an http.RoundTripper that serves a request with the API's
// handler directly: no socket, same middleware.
type inProcess struct {
	h      http.Handler
	remote string
	fwd    string
}

func (t inProcess) RoundTrip(req *http.Request) (*http.Response, error) {
	req.RemoteAddr = t.remote
	if t.fwd != "" {
		req.Header.Set("X-Forwarded-For", t.fwd)
	}
	req.RequestURI = req.URL.RequestURI()
	if req.Body == nil {
		req.Body = http.NoBody // a server request always has a body
	}
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, req)
	return rec.Result(), nil
}

// token returns a live access token for the session, minting one when the
// cached one is near its end.
func (c *Console) token(ctx context.Context, s ConsoleSession) (string, error) {
	if v, ok := c.tokens.Load(s.IDHash); ok {
		m := v.(mintedToken)
		if c.cfg.Now().Add(time.Minute).Before(m.expires) {
			return m.token, nil
		}
	}
	tok, exp, err := c.cfg.Mint(ctx, s.UserID)
	if err != nil {
		return "", err
	}
	c.tokens.Store(s.IDHash, mintedToken{token: tok, expires: exp})
	c.sweep()
	return tok, nil
}

// sweepEvery is how often minting a token also drops the expired ones.
const sweepEvery = time.Minute

// sweep drops the expired tokens, at most once every sweepEvery: a
// session that simply runs out is never seen again, and its token would
// stay in memory for good.
func (c *Console) sweep() {
	now := c.cfg.Now()
	last := c.swept.Load()
	if now.UnixNano()-last < int64(sweepEvery) || !c.swept.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	c.tokens.Range(func(k, v any) bool {
		if !now.Before(v.(mintedToken).expires) {
			c.tokens.Delete(k)
		}
		return true
	})
}

// over reports whether the session s has ended: signed out, past its
// absolute or idle expiry, or its account disabled, deleted or cut off
// since the sign-in. A session its account ends is ended for good, so
// re-enabling the account revives none of its sessions, as none of its
// tokens.
func (c *Console) over(ctx context.Context, s ConsoleSession, now time.Time) (bool, error) {
	if !s.EndedAt.IsZero() || !now.Before(s.ExpiresAt) || now.Sub(s.LastSeenAt) >= c.cfg.IdleTimeout {
		c.tokens.Delete(s.IDHash) // the session is over; so is its token
		return true, nil
	}
	if c.cfg.Account == nil {
		return false, nil
	}
	u, err := c.cfg.Account(ctx, s.UserID)
	if err != nil && !errors.Is(err, storage.ErrNotFound) {
		return false, err
	}
	// <=, as for tokens: a sign-in in the very microsecond of a cut is cut.
	if err == nil && u.Status == iam.UserActive && s.CreatedAt.After(u.TokensValidAfter) {
		return false, nil
	}
	return true, c.endSession(ctx, s.IDHash, now)
}

// endSession ends a session for good, forgets its token and tells the
// event streams relayed for it, on every replica.
func (c *Console) endSession(ctx context.Context, idHash string, now time.Time) error {
	if err := c.cfg.Sessions.EndConsoleSession(ctx, idHash, now); err != nil {
		return err
	}
	c.tokens.Delete(idHash)
	if c.cfg.Wake != nil {
		c.cfg.Wake.Notify(wakeup.ConsoleSessionEnded)
	}
	return nil
}

// sessionRecheck bounds how long a relayed event stream outlives its
// session when no notice of its end arrives (one lost with a replica).
const sessionRecheck = 30 * time.Second

// endWithSession calls cancel, which ends a stream relayed for session s,
// once s is over (over): at once on a sign-out anywhere, at its expiries
// when they come, or at the next recheck. The API's stream checks only
// the token the console minted, which outlives a sign-out. It returns
// when ctx ends.
func (c *Console) endWithSession(ctx context.Context, cancel context.CancelFunc, s ConsoleSession) {
	for {
		var signedOut <-chan struct{}
		if c.cfg.Wake != nil {
			signedOut = c.cfg.Wake.Wait(wakeup.ConsoleSessionEnded) // before looking
		}
		cur, err := c.cfg.Sessions.GetConsoleSession(ctx, s.IDHash)
		if ctx.Err() != nil {
			return
		}
		now := c.cfg.Now()
		wait := sessionRecheck
		switch {
		case errors.Is(err, storage.ErrNotFound):
			cancel()
			return
		case err == nil:
			if over, err := c.over(ctx, cur, now); over && err == nil {
				cancel()
				return
			}
			wait = min(wait, cur.ExpiresAt.Sub(now), cur.LastSeenAt.Add(c.cfg.IdleTimeout).Sub(now))
		}
		t := time.NewTimer(max(wait, 0) + time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-signedOut:
		case <-t.C:
		}
		t.Stop()
	}
}

// errNoSession: the request carries no live session.
var errNoSession = errors.New("no session")

// eventStreamPath is where a live page's script follows the project's
// event stream (pages.go routes it).
const eventStreamPath = "/events/stream"

// background reports whether r was made by the live-update script of an
// open page rather than by the person: its event stream, the fragments it
// refetches, or any other request a script starts. Such a request is
// served while the session lives but is no use of it, or a forgotten tab
// would keep its session from ever idling out.
//
// It is told by what the server itself decides on, not by a header the
// script would have to remember to send (an EventSource cannot set one):
// the stream's path, and the fragment parameter (which alone makes the
// server answer a fragment rather than a page, so no navigation carries
// it). Beyond those, a browser that sends fetch metadata says
// Sec-Fetch-Mode navigate for every navigation and form post, and
// something else (cors, same-origin, no-cors) for what a script fetches,
// so that catches a script's request the two above would miss. Its
// absence (browsers send none to a plain-http origin that is not
// loopback) marks nothing: there, navigations must still count.
func background(r *http.Request) bool {
	if r.URL.Path == eventStreamPath || r.URL.Query().Get("fragment") != "" {
		return true
	}
	mode := r.Header.Get("Sec-Fetch-Mode")
	return mode != "" && mode != "navigate"
}

// session resolves the request's live session. A request the person made
// slides its idle expiry; a live page's background request (background)
// does not.
func (c *Console) session(r *http.Request) (ConsoleSession, error) {
	ck, err := r.Cookie(c.cookie(SessionCookie, "/").Name)
	if err != nil || ck.Value == "" {
		return ConsoleSession{}, errNoSession
	}
	s, err := c.cfg.Sessions.GetConsoleSession(r.Context(), hashID(ck.Value))
	if errors.Is(err, storage.ErrNotFound) {
		return s, errNoSession
	}
	if err != nil {
		return s, err
	}
	now := c.cfg.Now()
	if over, err := c.over(r.Context(), s, now); over || err != nil {
		if err == nil {
			err = errNoSession
		}
		return s, err
	}
	// Writing last-seen on every request would make each page a write;
	// once a minute is exact enough for a 30-minute idle limit.
	if !background(r) && now.Sub(s.LastSeenAt) > time.Minute {
		if err := c.cfg.Sessions.TouchConsoleSession(r.Context(), s.IDHash, now); err != nil {
			return s, err
		}
	}
	return s, nil
}

// checkCSRF compares a form's token with the session's, in constant time.
func checkCSRF(r *http.Request, want string) bool {
	got := r.PostFormValue("csrf_token")
	if got == "" {
		got = r.Header.Get("X-CSRF-Token")
	}
	return want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}
