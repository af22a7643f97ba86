package httpapi

import (
	"net"
	"net/http"
	"net/netip"

	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/ratelimit"
	"github.com/gpuaas/gpuaas/internal/registry"
)

// clientLimiter throttles the anonymous credential endpoints (password
// login, service-account token exchange) per client address, so guessing
// passwords or flooding the audit log with refused attempts is slow. It is
// per replica; a load balancer in front should keep its own limits too.
type clientLimiter struct {
	clients *ratelimit.Keyed
}

// maxTrackedClients bounds the memory the limiter may use; past it, the
// client quiet the longest is forgotten.
const maxTrackedClients = 10_000

func newClientLimiter(perSecond float64, burst int) *clientLimiter {
	if perSecond <= 0 {
		return nil
	}
	return &clientLimiter{clients: ratelimit.New(perSecond, burst, maxTrackedClients)}
}

func (l *clientLimiter) allow(r *http.Request) bool {
	return l == nil || l.clients.Take(clientKey(r.RemoteAddr), 1) == 0
}

// clientKey is the bucket a client address counts against: an IPv4
// address, or the /64 prefix of an IPv6 one (one host, a cloud VM or a home
// line, holds a whole /64 and could take a fresh address for every
// attempt).
func clientKey(remoteAddr string) string {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	ip = ip.Unmap()
	if ip.Is4() {
		return ip.String()
	}
	p, err := ip.WithZone("").Prefix(64)
	if err != nil {
		return host
	}
	return p.String()
}

var errRateLimited = &errdefs.Error{Kind: errdefs.KindRateLimited, Code: "rate_limited",
	Message: "too many sign-in or token requests from this address; wait a few seconds and retry"}

// limitRegistryToken puts the registry's token endpoint (/v2/token, where
// docker login sends a password or API token) behind the same per-address
// limiter as sign-in, answering in the registry's error format.
func (a *API) limitRegistryToken(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == registry.TokenPath && !a.limiter.allow(r) {
			w.Header().Set("Retry-After", "1")
			registry.WriteError(w, r, http.StatusTooManyRequests, errRateLimited.Code, errRateLimited.Message)
			return
		}
		h.ServeHTTP(w, r)
	})
}
