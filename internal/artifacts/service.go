// Package artifacts owns app artifacts: publish and pull intents, digest
// registration against the real registry or blob store, and the trust and
// promotion lifecycle.
//
// The control plane owns ownership, policy, audit, lifecycle and digest
// truth; the OCI registry (package registry) and the blob store (package
// blobstore) own the bytes. The service is also the registry's Authorizer:
// the credentials publish and pull intents hand out are checked here.
package artifacts

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpuaas/gpuaas/internal/blobstore"
	"github.com/gpuaas/gpuaas/internal/clock"
	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/ratelimit"
	"github.com/gpuaas/gpuaas/internal/registry"
	"github.com/gpuaas/gpuaas/internal/sealer"
	"github.com/gpuaas/gpuaas/internal/worker"
)

// Defaults for the intent lifetimes.
const (
	DefaultIntentTTL = 15 * time.Minute // publish and pull intents and their registry credentials
	MaxIntentTTL     = time.Hour
	DefaultWrapTTL   = 5 * time.Minute // wrapping tokens (capped by the intent's expiry)
)

// Deps are what the artifacts service needs.
type Deps struct {
	Store  Store
	IAM    *iam.Service
	Logger *slog.Logger
	Now    func() time.Time
	// Sealer encrypts wrapped credentials at rest (built-in vault).
	Sealer *sealer.Sealer
	// Blobs is project blob storage (artifact_store://).
	Blobs *blobstore.Store
	// Vault holds wrapped credentials; nil means the built-in one (database + Sealer).
	Vault CredentialVault
	// BlobQuota is the bytes of blob storage each project may hold
	// (registered blob artifacts, uploads committed and not registered,
	// uploads in progress); 0 means no quota (the blob store's object size
	// limit still applies). A project's override (StorageQuota) replaces
	// it and RegistryQuota.
	BlobQuota int64
	// RegistryQuota is the bytes of distinct blobs (layers, configs,
	// manifests) each project may hold in the embedded registry, pushes in
	// progress included; 0 means no quota. MaxRegistryBlob is the largest
	// single blob a push may upload; 0 means no limit.
	RegistryQuota   int64
	MaxRegistryBlob int64
	// RegistryStreamTimeout is the longest one registry request may
	// stream (--stream-timeout): a hold written to less recently than that
	// may still belong to a request in flight (RegistryHoldIdle).
	RegistryStreamTimeout time.Duration
	// IntentTTL is the default lifetime of intents; WrapTTL of wrapping tokens.
	IntentTTL time.Duration
	WrapTTL   time.Duration
	// SignatureTags is the lock replicas share on a digest's signature
	// tags (verification and the registry's content gate hold it); nil
	// means this process's lock only, enough for one process (SQLite).
	SignatureTags registry.SignatureTagLocker
	// UnwrapRate and UnwrapBurst limit the credential unwraps one
	// principal may make on this replica (unwraplimit.go); a rate of 0
	// takes every unwrap.
	UnwrapRate  float64
	UnwrapBurst int
}

// Service is the artifacts domain.
type Service struct {
	Deps
	reg atomic.Pointer[registryLink]
	// registryRecount is the registry recount job, kicked when a manifest
	// is deleted so its blobs are recounted at once (set at wiring).
	registryRecount *worker.Periodic

	usersMu sync.Mutex
	users   []InstanceUsage

	// unwrapLimit is each principal's unwrap budget (nil: no limit).
	unwrapLimit *ratelimit.Keyed

	// registerChecked, when set, is called by Register between the
	// registry's checks and the record (OnRegisterChecked).
	registerChecked atomic.Pointer[func(context.Context, AppArtifact)]
	// deleteChecked, when set, is called by a registry manifest delete
	// between its checks and the delete (OnManifestDeleteChecked).
	deleteChecked atomic.Pointer[func(ctx context.Context, repository, digest string)]
}

// OnRegisterChecked makes Register call f (nil: nothing) once the registry
// has answered its checks, under the hold that keeps them true, before the
// artifact is recorded. It is for tests, which pause a registration there
// to show what the hold keeps out.
func (s *Service) OnRegisterChecked(f func(ctx context.Context, a AppArtifact)) {
	if f == nil {
		s.registerChecked.Store(nil)
		return
	}
	s.registerChecked.Store(&f)
}

// OnManifestDeleteChecked makes a registry manifest delete call f (nil:
// nothing) once its checks let it through, under the content gate's hold,
// before the registry deletes. It is for tests, which pause a delete there
// to show what its hold keeps out, and what it does not.
func (s *Service) OnManifestDeleteChecked(f func(ctx context.Context, repository, digest string)) {
	if f == nil {
		s.deleteChecked.Store(nil)
		return
	}
	s.deleteChecked.Store(&f)
}

// AddInstanceUsage adds a domain that runs artifacts: an artifact is not
// retired while any of them runs its digest. The instances domain is built
// after artifacts (it pulls through them), so it registers here; every
// registration is asked, none replaces another.
func (s *Service) AddInstanceUsage(u InstanceUsage) {
	s.usersMu.Lock()
	defer s.usersMu.Unlock()
	s.users = append(s.users, u)
}

func (s *Service) instanceUsers() []InstanceUsage {
	s.usersMu.Lock()
	defer s.usersMu.Unlock()
	return s.users
}

// registryLink is the registry the service talks to, attached once the
// listener's public address is known.
type registryLink struct {
	reg      *registry.Registry
	host     string // host[:port] clients push to and pull from
	insecure bool   // plain HTTP
	rt       http.RoundTripper
	// referencedBlobs is reg.ReferencedBlobs: what a recount reads from
	// the registry's storage (a test's stand-in reads slowly).
	referencedBlobs func(ctx context.Context, repositories []string, limit int) (map[string]bool, error)
	// recountTimeout bounds one project's recount; 0 is
	// registryRecountTimeout (a test's pass is shorter).
	recountTimeout time.Duration
}

// New builds the service.
func New(d Deps) *Service {
	d.Now = clock.Or(d.Now)
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.IntentTTL <= 0 {
		d.IntentTTL = DefaultIntentTTL
	}
	if d.WrapTTL <= 0 {
		d.WrapTTL = DefaultWrapTTL
	}
	s := &Service{Deps: d, unwrapLimit: ratelimit.New(d.UnwrapRate, d.UnwrapBurst, maxLimitedUnwrappers)}
	if d.Vault == nil && d.Sealer != nil {
		// The vault reads the service's clock at call time, so the service
		// and its vault never disagree on what has expired.
		s.Vault = &BuiltinVault{Sealer: d.Sealer, Now: func() time.Time { return s.Now() }}
	}
	return s
}

// AttachRegistry connects the service to the registry clients use: host is
// the host[:port] in image references (the API listener's public address for
// the embedded registry, the external registry's host otherwise) and
// insecure tells whether the registry speaks plain HTTP.
func (s *Service) AttachRegistry(reg *registry.Registry, host string, insecure bool) {
	l := &registryLink{reg: reg, host: host, insecure: insecure, rt: http.DefaultTransport, referencedBlobs: reg.ReferencedBlobs}
	if !reg.External() {
		l.rt = registry.HandlerTransport{Handler: reg.Handler(), PlainHTTP: insecure}
	}
	s.reg.Store(l)
}

func (s *Service) registry() (*registryLink, error) {
	l := s.reg.Load()
	if l == nil {
		return nil, errdefs.FailedPrecondition("registry_unavailable", "the OCI registry is not attached yet; retry once the server is listening")
	}
	return l, nil
}
