package registry

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync"

	"github.com/distribution/distribution/v3"
	"github.com/distribution/distribution/v3/configuration"
	"github.com/distribution/distribution/v3/manifest/manifestlist"
	"github.com/distribution/distribution/v3/manifest/ocischema"
	"github.com/distribution/distribution/v3/registry/auth"
	"github.com/distribution/distribution/v3/registry/handlers"
	"github.com/distribution/distribution/v3/registry/storage"
	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
	"github.com/google/uuid"
	"github.com/opencontainers/go-digest"

	// Register the token access controller (it registers itself in a
	// process-wide map at init; so does the filesystem driver).
	_ "github.com/distribution/distribution/v3/registry/auth/token"
)

// Registry is the embedded OCI registry (or, in external mode, the link to
// an external one) together with its token endpoint.
type Registry struct {
	cfg    Config
	tokens *TokenHandler
	// live is the embedded registry's access controller, whose trusted
	// keys SetKeys replaces; nil in external mode.
	live       *liveAccess
	app        *handlers.App // nil in external mode
	handler    http.Handler
	client     *Client
	logger     *slog.Logger
	unregister func()
	closeOnce  sync.Once
	// uploads reaches the embedded registry's stored upload sessions;
	// nil in external mode and for an authorizer that keeps no quota.
	uploads *uploadStore
	// indexChildren reads an index's manifests from storage (the content
	// gate's IndexChildren); nil where the registry keeps no gate.
	indexChildren func(ctx context.Context, repository, digest string) ([]string, error)
	// storageLock is the shared hold on the embedded registry's storage
	// that keeps `gpuaas registry gc` out (storagelock.go); nil in
	// external mode.
	storageLock *storageLock
}

// New builds the registry. ctx bounds the embedded registry's background
// work (upload purging) together with Close.
func New(ctx context.Context, cfg Config, authz Authorizer, logger *slog.Logger) (*Registry, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if authz == nil {
		return nil, invalidf("registry_config_invalid", "registry needs an authorizer")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("component", "registry")
	keys := cfg.Keys
	if keys == nil {
		signing, err := GenerateSigningKey(EdDSA)
		if err != nil {
			return nil, err
		}
		if keys, err = NewKeySet(signing); err != nil {
			return nil, err
		}
		logger.Warn("registry: no token signing key configured, using an ephemeral one", "kid", signing.KeyID())
	}
	tokens, err := NewTokenHandler(cfg, keys, authz, logger)
	if err != nil {
		return nil, err
	}
	r := &Registry{cfg: cfg, tokens: tokens, logger: logger}

	if cfg.External() {
		r.handler = r.route(nil)
		r.client, err = newHTTPClient(cfg.ExternalURL, tokens, http.DefaultTransport)
		if err != nil {
			return nil, err
		}
		return r, nil
	}

	if err := os.MkdirAll(cfg.RootDir, 0o700); err != nil {
		return nil, fmt.Errorf("registry root: %w", err)
	}
	// Held until Close, so that garbage collection cannot sweep what this
	// process may be writing.
	if r.storageLock, err = lockStorage(cfg.RootDir, false, gcRunningMessage(cfg.RootDir)); err != nil {
		return nil, err
	}
	id := uuid.NewString()
	r.unregister = registerLogger(id, logger)
	app, access, err := newApp(context.WithValue(ctx, instanceKey, id), cfg, keys)
	if err == nil {
		r.live = access
	}
	if err != nil {
		r.unregister()
		_ = r.storageLock.release()
		return nil, err
	}
	r.app = app
	tagged := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		app.ServeHTTP(w, req.WithContext(context.WithValue(req.Context(), instanceKey, id)))
	})
	var served http.Handler = tagged
	_, gated := authz.(ContentGate)
	quota, quoted := authz.(UploadQuota)
	var driver storagedriver.StorageDriver
	var ns distribution.Namespace
	if gated || quoted {
		if driver, ns, err = openStorage(ctx, cfg.RootDir); err != nil {
			r.Close()
			return nil, err
		}
	}
	if gate, ok := authz.(ContentGate); ok {
		r.indexChildren = indexLookup(ns)
		served = &gateHandler{gate: gate, authorized: requestAuthorized(access), tagsOf: tagLookup(ns), subject: requestSubject(access),
			indexChildren: r.IndexManifests, next: served, logger: logger,
			fail: func(w http.ResponseWriter, req *http.Request, err error) {
				logger.ErrorContext(req.Context(), "registry: content gate failed", "err", err)
				tokens.fail(w, req, http.StatusInternalServerError, "internal", "the registry could not check this manifest; retry")
			}}
	}
	if quoted {
		// Outside the content gate: a write is held against the quota
		// before the gate or the registry sees its body.
		us := uploadStore{driver: driver, blobs: ns.BlobStatter(), ns: ns}
		r.uploads = &us
		served = &quotaHandler{quota: quota, authorized: requestAuthorized(access), mayPull: requestMayPull(access), next: served,
			blobSize: us.blobSize, removeUpload: us.removeUpload, uploadExists: us.uploadExists, referenceSize: us.referenceSize, logger: logger,
			fail: func(w http.ResponseWriter, req *http.Request, err error) {
				logger.ErrorContext(req.Context(), "registry: quota check failed", "err", err)
				tokens.fail(w, req, http.StatusInternalServerError, "internal", "the registry could not account for this push; retry")
			}}
	}
	r.handler = r.route(served)
	r.client, err = newHTTPClient("http://"+cfg.Host, tokens, HandlerTransport{Handler: r.handler})
	if err != nil {
		r.Close()
		return nil, err
	}
	logger.Info("registry: embedded registry ready", "root", cfg.RootDir, "service", cfg.Service, "realm", cfg.Realm, "kid", keys.Signing().KeyID())
	return r, nil
}

// route serves the token endpoint and hands everything else to the registry.
func (r *Registry) route(registry http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == TokenPath {
			r.tokens.ServeHTTP(w, req)
			return
		}
		if registry == nil {
			http.NotFound(w, req)
			return
		}
		registry.ServeHTTP(w, req)
	})
}

// newApp configures a distribution App: filesystem storage under RootDir,
// deletes enabled, token auth trusting keys. It also returns an access
// controller configured as the App's, for the content gate to ask what a
// request's token grants. NewApp reports configuration errors by
// panicking; they are returned as errors here.
func newApp(ctx context.Context, cfg Config, keys *KeySet) (app *handlers.App, access *liveAccess, err error) {
	root, err := filepath.Abs(cfg.RootDir)
	if err != nil {
		return nil, nil, err
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, nil, fmt.Errorf("registry root: %w", err)
	}
	secret := cfg.HTTPSecret
	if secret == "" {
		var b [32]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, nil, err
		}
		secret = hex.EncodeToString(b[:])
	}
	dc := &configuration.Configuration{Version: "0.1"}
	dc.Log.AccessLog.Disabled = true
	dc.HTTP.Secret = secret
	dc.HTTP.RelativeURLs = true
	dc.Storage = configuration.Storage{
		"filesystem": configuration.Parameters{"rootdirectory": root},
		"delete":     configuration.Parameters{"enabled": true},
		"redirect":   configuration.Parameters{"disable": true},
		// No blob descriptor cache: distribution's in-memory one is per
		// process, and replicas sharing this storage would answer a
		// manifest another replica deleted from it (HEAD and GET alike).
		// A stat is a read of a small link file.
		"maintenance": configuration.Parameters{"uploadpurging": map[any]any{
			"enabled": true, "age": "168h", "interval": "24h", "dryrun": false,
		}},
	}
	access = &liveAccess{unknownKey: cfg.OnUnknownKey, params: configuration.Parameters{
		"realm":             cfg.Realm,
		"service":           cfg.Service,
		"issuer":            cfg.Issuer,
		"signingalgorithms": []any{string(EdDSA), string(ES256)},
	}}
	if err := access.set(keys); err != nil {
		return nil, nil, err
	}
	dc.Auth = configuration.Auth{liveAuthName: configuration.Parameters{"live": access}}
	defer func() {
		if p := recover(); p != nil {
			app, access, err = nil, nil, fmt.Errorf("configure embedded registry: %v", p)
		}
	}()
	return handlers.NewApp(ctx, dc), access, nil
}

// Handler serves /v2/token and the OCI distribution API under /v2/; mount
// it at "/v2/" on the control plane's listener.
func (r *Registry) Handler() http.Handler { return r.handler }

// TokenHandler returns the token endpoint (also served by Handler).
func (r *Registry) TokenHandler() *TokenHandler { return r.tokens }

// External reports whether this links to an external registry (no
// registry runs in-process).
func (r *Registry) External() bool { return r.cfg.External() }

// Realm is the token endpoint URL registry challenges point clients to.
func (r *Registry) Realm() string { return r.cfg.Realm }

// Client returns the control plane's own client of this registry.
func (r *Registry) Client() *Client { return r.client }

// Keys returns the current token key set.
func (r *Registry) Keys() *KeySet { return r.tokens.keys.Load() }

// JWKS returns the token verification keys, for an external registry's
// "auth.token.jwks" file.
func (r *Registry) JWKS() ([]byte, error) { return r.Keys().JWKS() }

// ManifestExists is r.Client().ManifestExists.
func (r *Registry) ManifestExists(ctx context.Context, repository, digest string) (string, int64, error) {
	return r.client.ManifestExists(ctx, repository, digest)
}

// IndexManifests lists the manifests the image index digest of repository
// references (nested indexes' too), read from the registry's storage;
// nothing for an image manifest, or where the registry keeps no content
// gate (an external registry: not checked).
func (r *Registry) IndexManifests(ctx context.Context, repository, digest string) ([]string, error) {
	if r.indexChildren == nil || !ValidRepository(repository) {
		return nil, nil
	}
	return r.indexChildren(ctx, repository, digest)
}

// ResolveTag is r.Client().ResolveTag.
func (r *Registry) ResolveTag(ctx context.Context, repository, tag string) (string, error) {
	return r.client.ResolveTag(ctx, repository, tag)
}

// Close stops the embedded registry's background work (upload purger) and
// detaches its logger, then releases its hold on the storage. Requests
// still in flight finish against storage; the caller shuts its listener
// down first. distribution's App.Shutdown leaves its (endpoint-less)
// notification broadcaster goroutine parked, so build a Registry once per
// process, not per request.
func (r *Registry) Close() error {
	var err error
	r.closeOnce.Do(func() {
		if r.app != nil {
			if err = r.app.Shutdown(); errors.Is(err, context.Canceled) {
				err = nil
			}
		}
		if r.unregister != nil {
			r.unregister()
		}
		err = errors.Join(err, r.storageLock.release())
	})
	return err
}

// requestAuthorized reports whether req's bearer token grants, by access,
// what the registry requires of req on repository: pull for a GET or HEAD,
// pull and push for a PUT, PATCH or POST, delete for a DELETE
// (distribution's own rule).
func requestAuthorized(access auth.AccessController) func(*http.Request, string) bool {
	return func(req *http.Request, repository string) bool {
		res := auth.Resource{Type: "repository", Name: repository}
		var want []auth.Access
		switch req.Method {
		case http.MethodGet, http.MethodHead:
			want = []auth.Access{{Resource: res, Action: ActionPull}}
		case http.MethodPut, http.MethodPatch, http.MethodPost:
			want = []auth.Access{{Resource: res, Action: ActionPull}, {Resource: res, Action: ActionPush}}
		case http.MethodDelete:
			want = []auth.Access{{Resource: res, Action: ActionDelete}}
		default:
			return false
		}
		_, err := access.Authorized(req, want...)
		return err == nil
	}
}

// requestSubject returns the subject of a request's token that grants
// delete in repository ("" if it grants none).
func requestSubject(access auth.AccessController) func(*http.Request, string) string {
	return func(req *http.Request, repository string) string {
		g, err := access.Authorized(req, auth.Access{Resource: auth.Resource{Type: "repository", Name: repository}, Action: ActionDelete})
		if err != nil || g == nil {
			return ""
		}
		return g.User.Name
	}
}

// requestMayPull reports whether a request's token may pull repository,
// whatever its method.
func requestMayPull(access auth.AccessController) func(*http.Request, string) bool {
	return func(req *http.Request, repository string) bool {
		_, err := access.Authorized(req, auth.Access{Resource: auth.Resource{Type: "repository", Name: repository}, Action: ActionPull})
		return err == nil
	}
}

// openStorage opens the embedded registry's storage under root as the
// registry itself sees it, for the gate's and the quota's lookups.
func openStorage(ctx context.Context, root string) (storagedriver.StorageDriver, distribution.Namespace, error) {
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, nil, err
	}
	driver, err := filesystem.FromParameters(map[string]any{"rootdirectory": root})
	if err != nil {
		return nil, nil, fmt.Errorf("registry storage: %w", err)
	}
	ns, err := storage.NewRegistry(ctx, driver)
	if err != nil {
		return nil, nil, fmt.Errorf("registry storage: %w", err)
	}
	return driver, ns, nil
}

// tagLookup returns the tags of a repository that point at a digest,
// read from the embedded registry's storage.
// indexLookup returns the gate's IndexChildren on the registry's storage,
// read directly: a revoked index, whose reads the gate refuses, may still
// be what a live instance runs. Each manifest's digest is checked by the
// registry when it is put, so no index can reference itself (nested ones
// end), and seen reads each once.
func indexLookup(ns distribution.Namespace) func(ctx context.Context, repository, digest string) ([]string, error) {
	return func(ctx context.Context, repository, d string) ([]string, error) {
		repo, err := ns.Repository(ctx, repositoryName(repository))
		if err != nil {
			return nil, err
		}
		ms, err := repo.Manifests(ctx)
		if err != nil {
			return nil, err
		}
		var out []string
		seen := map[digest.Digest]bool{}
		var walk func(dg digest.Digest) error
		walk = func(dg digest.Digest) error {
			if seen[dg] {
				return nil
			}
			seen[dg] = true
			if ok, err := ms.Exists(ctx, dg); err != nil || !ok {
				return err
			}
			m, err := ms.Get(ctx, dg)
			if err != nil {
				return fmt.Errorf("read manifest %s of %s: %w", dg, repository, err)
			}
			switch m.(type) {
			case *manifestlist.DeserializedManifestList, *ocischema.DeserializedImageIndex:
			default:
				return nil // an image: its references are blobs
			}
			for _, ref := range m.References() {
				if ref.Digest.Validate() != nil || seen[ref.Digest] {
					continue
				}
				out = append(out, ref.Digest.String())
				if err := walk(ref.Digest); err != nil {
					return err
				}
			}
			return nil
		}
		dg, err := digest.Parse(d)
		if err != nil {
			return nil, nil // the registry stores nothing under it
		}
		if err := walk(dg); err != nil {
			return nil, err
		}
		return out, nil
	}
}

func tagLookup(ns distribution.Namespace) func(ctx context.Context, repository, digest string) ([]string, error) {
	return func(ctx context.Context, repository, digest string) ([]string, error) {
		repo, err := ns.Repository(ctx, repositoryName(repository))
		if err != nil {
			return nil, err
		}
		ts := repo.Tags(ctx)
		all, err := ts.All(ctx)
		if errors.As(err, new(distribution.ErrRepositoryUnknown)) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		var tags []string
		for _, tag := range all {
			desc, err := ts.Get(ctx, tag)
			if errors.As(err, new(distribution.ErrTagUnknown)) {
				continue // untagged meanwhile
			}
			if err != nil {
				return nil, err
			}
			if desc.Digest.String() == digest {
				tags = append(tags, tag)
			}
		}
		return tags, nil
	}
}

// repositoryName is a repository name (already checked with
// ValidRepository) as distribution's storage takes it.
type repositoryName string

func (n repositoryName) Name() string   { return string(n) }
func (n repositoryName) String() string { return string(n) }
