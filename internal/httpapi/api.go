// Package httpapi is the thin REST transport of gpuaas: a route table,
// middleware for the API conventions, and handlers that decode, call a
// domain service and encode. No business rule lives here.
package httpapi

import (
	"crypto/rand"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/gpuaas/gpuaas/internal/artifacts"
	"github.com/gpuaas/gpuaas/internal/billing"
	"github.com/gpuaas/gpuaas/internal/catalog"
	"github.com/gpuaas/gpuaas/internal/clock"
	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/events"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/instances"
	"github.com/gpuaas/gpuaas/internal/nodes"
	"github.com/gpuaas/gpuaas/internal/registry"
	"github.com/gpuaas/gpuaas/internal/releases"
	"github.com/gpuaas/gpuaas/internal/serviceaccounts"
)

// API holds the services the handlers call.
type API struct {
	Store          Store  // what the edge itself reads and writes
	Health         Health // the database, as /readyz sees it
	IAM            *iam.Service
	Tokens         *iam.Tokens
	Logger         *slog.Logger
	MaxBodyBytes   int64
	IdempotencyTTL time.Duration
	// IdempotencyHashKey keys the hash a keyed request is remembered by
	// (RequestHash); every replica needs the same one. Empty: a random key,
	// good for one process.
	IdempotencyHashKey []byte
	SA                 *serviceaccounts.Service
	Catalog            *catalog.Service
	Artifacts          *artifacts.Service
	Billing            *billing.Service
	Instances          *instances.Service
	Nodes              *nodes.Service
	Releases           *releases.Service
	// PublicURL is the server's public base URL (known once it listens).
	PublicURL func() string
	Events    *events.Reader
	// RelayKick asks this replica's outbox relay for a pass now.
	RelayKick func()
	// WebSocketOrigins: Origin patterns allowed on event WebSockets besides
	// the request's own host.
	WebSocketOrigins []string
	OpenAPI          []byte // the contract document, served at /api/openapi.yaml
	AsyncAPI         []byte // the event contract, served at /api/asyncapi.yaml
	// Mounts are extra handlers on the same listener (the OCI registry at /v2/).
	Mounts map[string]http.Handler
	// CredentialRate and CredentialBurst throttle the anonymous credential
	// endpoints per client address (requests per second; 0 disables).
	CredentialRate  float64
	CredentialBurst int
	// StreamTimeout is the read/write deadline of streaming routes (blob
	// uploads, the registry), which the server's shorter timeouts would cut.
	StreamTimeout time.Duration
	// Now is the server's clock: it stamps idempotency records and their
	// expiry (nil: the wall clock).
	Now func() time.Time
	// Writable, when set, is asked before every state-changing request
	// (any method but GET, HEAD and OPTIONS), the registry's included; an
	// error is the answer instead (the server's schema guard: 503
	// schema_mismatch while the database's schema is not the binary's).
	Writable func() error
	// UIOpenURL builds the gateway link that redeems a one-time UI code
	// (nil: no gateway, the ui-open route refuses).
	UIOpenURL func(instanceID, path, code string) string

	// Fallback serves paths outside the API (the web console at /); nil
	// answers them with the API's 404 envelope.
	Fallback http.Handler

	metrics *metrics
	limiter *clientLimiter
	streams streamSlots
	once    sync.Once
	handler http.Handler
}

// route is one row of the route table.
type route struct {
	method, path string
	handler      func(http.ResponseWriter, *http.Request) error
	public       bool  // no token needed
	maxBody      int64 // 0: API default; -1: no limit (streamed uploads)
	// noIdempotency marks POSTs that are not mutations (login, token exchange).
	noIdempotency bool
	// credential marks anonymous endpoints that check a secret; they are
	// rate limited per client address.
	credential bool
	// stream marks routes whose bodies are large streams: they get
	// API.StreamTimeout instead of the server's read/write timeouts.
	stream bool
	// eventStream marks long-lived responses (SSE): no write deadline.
	eventStream bool
	// websocket marks WebSocket upgrades: the token may also come as the
	// subprotocol bearer.<token> (browsers cannot set Authorization).
	websocket bool
	// writes marks a GET that changes state (an agent's task poll leases
	// its tasks): API.Writable is asked as for a POST.
	writes  bool
	pattern string
}

// Routes is the whole REST surface on one screen.
func (a *API) routes() []route {
	rs := []route{
		{method: "GET", path: "/healthz", handler: a.healthz, public: true},
		{method: "GET", path: "/readyz", handler: a.readyz, public: true},
		{method: "GET", path: "/.well-known/jwks.json", handler: a.jwks, public: true},
		{method: "GET", path: "/api/openapi.yaml", handler: a.openapi, public: true},

		{method: "POST", path: "/api/v1/auth/login", handler: a.login, public: true, noIdempotency: true, credential: true},
		{method: "GET", path: "/api/v1/me", handler: a.me},

		{method: "POST", path: "/api/v1/orgs", handler: a.createOrg},
		{method: "GET", path: "/api/v1/orgs", handler: a.listOrgs},
		{method: "GET", path: "/api/v1/orgs/{org_id}", handler: a.getOrg},
		{method: "POST", path: "/api/v1/orgs/{org_id}/projects", handler: a.createProject},
		{method: "GET", path: "/api/v1/orgs/{org_id}/projects", handler: a.listProjects},
		{method: "GET", path: "/api/v1/orgs/{org_id}/members", handler: a.listOrgMembers},
		{method: "POST", path: "/api/v1/orgs/{org_id}/members", handler: a.addOrgMember},
		{method: "DELETE", path: "/api/v1/orgs/{org_id}/members/{binding_id}", handler: a.removeOrgMember},

		{method: "GET", path: "/api/v1/projects/{project_id}", handler: a.getProject},
		{method: "GET", path: "/api/v1/projects/{project_id}/members", handler: a.listProjectMembers},
		{method: "POST", path: "/api/v1/projects/{project_id}/members", handler: a.addProjectMember},
		{method: "DELETE", path: "/api/v1/projects/{project_id}/members/{binding_id}", handler: a.removeProjectMember},

		{method: "POST", path: "/api/v1/users", handler: a.createUser},
		{method: "POST", path: "/api/v1/users/{user_id}/disable", handler: a.disableUser},
		{method: "POST", path: "/api/v1/users/{user_id}/enable", handler: a.enableUser},

		{method: "GET", path: "/api/v1/audit-events", handler: a.listAudit},
	}
	rs = append(rs, a.serviceAccountRoutes()...)
	rs = append(rs, a.catalogRoutes()...)
	rs = append(rs, a.artifactRoutes()...)
	rs = append(rs, a.billingRoutes()...)
	rs = append(rs, a.instanceRoutes()...)
	rs = append(rs, a.workerRoutes()...)
	rs = append(rs, a.nodeRoutes()...)
	rs = append(rs, a.eventRoutes()...)
	rs = append(rs, a.releaseRoutes()...)
	for i := range rs {
		rs[i].pattern = rs[i].method + " " + rs[i].path
	}
	return rs
}

// RouteInfo describes a route for tests that sweep the whole API.
type RouteInfo struct {
	Method, Path string
	Public       bool
}

// Routes lists the route table.
func (a *API) Routes() []RouteInfo {
	var out []RouteInfo
	for _, rt := range a.routes() {
		out = append(out, RouteInfo{Method: rt.method, Path: rt.path, Public: rt.public})
	}
	return out
}

// Handler returns the HTTP handler of the whole API, built once.
func (a *API) Handler() http.Handler {
	a.once.Do(func() { a.handler = a.build() })
	return a.handler
}

// changes reports whether a request's method may change state.
func changes(r *http.Request) bool {
	return r.Method != http.MethodGet && r.Method != http.MethodHead && r.Method != http.MethodOptions
}

// refuseChanges answers a state-changing request with Writable's error,
// written by answer, while it has one: the registry's mount answers in the
// registry's error format (docker and crane print it), the fallback, which
// wrap does not cover, in the API's envelope. The registry's token endpoint
// stays open: a token is a read (containerd asks for one with a POST
// first, and a 503 there would fail pulls); no fallback path is under /v2/.
func (a *API) refuseChanges(h http.Handler, answer func(http.ResponseWriter, *http.Request, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.Writable != nil && changes(r) && r.URL.Path != registry.TokenPath {
			if err := a.Writable(); err != nil {
				answer(w, r, err)
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// answerAPI writes err in the API's error envelope.
func (a *API) answerAPI(w http.ResponseWriter, r *http.Request, err error) {
	writeError(w, r, a.Logger, err)
}

// answerRegistry writes Writable's refusal in the registry's error format.
func answerRegistry(w http.ResponseWriter, r *http.Request, err error) {
	e, _ := errdefs.As(err)
	registry.WriteError(w, r, http.StatusServiceUnavailable, e.Code, e.Message)
}

// isAPIPath: paths the API answers itself, route or not (a 404 there is
// the API's JSON envelope, never a console page).
func isAPIPath(p string) bool {
	for _, pre := range []string{"/api/", "/v2/", "/.well-known/"} {
		if strings.HasPrefix(p, pre) {
			return true
		}
	}
	return p == "/healthz" || p == "/readyz" || p == "/metrics"
}

func (a *API) build() http.Handler {
	if a.MaxBodyBytes == 0 {
		a.MaxBodyBytes = 1 << 20
	}
	if a.IdempotencyTTL == 0 {
		a.IdempotencyTTL = 24 * time.Hour
	}
	if len(a.IdempotencyHashKey) == 0 {
		a.IdempotencyHashKey = make([]byte, 32)
		_, _ = rand.Read(a.IdempotencyHashKey)
	}
	if a.Logger == nil {
		a.Logger = slog.New(slog.DiscardHandler)
	}
	a.Now = clock.Or(a.Now)
	a.metrics = newMetrics()
	if a.Billing != nil {
		a.metrics.reg.MustRegister(countsCollector{unratedDesc, a.Billing.UnratedCounts})
	}
	a.metrics.reg.MustRegister(countsCollector{parkedDesc, a.Store.Read().ParkedEventCounts})
	a.limiter = newClientLimiter(a.CredentialRate, a.CredentialBurst)
	mux := http.NewServeMux()
	for _, rt := range a.routes() {
		mux.Handle(rt.pattern, a.wrap(rt))
	}
	mux.Handle("GET /metrics", a.metrics.handler())
	for prefix, h := range a.Mounts {
		mux.Handle(prefix, a.refuseChanges(a.WithStreamDeadlines(a.limitRegistryToken(h)), answerRegistry))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, pattern := mux.Handler(r)
		if pattern != "" {
			mux.ServeHTTP(w, r) // ServeHTTP, not h: it sets the path values
			return
		}
		if a.Fallback != nil && !isAPIPath(r.URL.Path) {
			a.refuseChanges(a.Fallback, a.answerAPI).ServeHTTP(w, r) // the console's own forms write too
			return
		}
		// No route matched: learn from the mux whether the path exists with
		// another method (405) or not at all (404), and answer with the
		// canonical envelope either way.
		probe := httptest.NewRecorder()
		h.ServeHTTP(probe, r)
		// A fresh route per request: the handler closes over this request's
		// probe, so a shared route would be a data race between requests.
		fallback := route{pattern: "unmatched", public: true}
		fallback.handler = func(w http.ResponseWriter, r *http.Request) error {
			if probe.Code == http.StatusMethodNotAllowed {
				w.Header().Set("Allow", probe.Header().Get("Allow"))
				return &errdefs.Error{Kind: errdefs.KindInvalidArgument, Code: "method_not_allowed",
					Message: r.Method + " is not allowed on " + r.URL.Path + "; allowed: " + probe.Header().Get("Allow")}
			}
			return errdefs.NotFound("route_not_found", "no API route matches %s %s; see /api/openapi.yaml", r.Method, strings.TrimSpace(r.URL.Path))
		}
		a.wrap(fallback).ServeHTTP(w, r)
	})
}
