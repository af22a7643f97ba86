package server

import (
	"context"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"time"

	"github.com/gpuaas/gpuaas/internal/artifacts"
	"github.com/gpuaas/gpuaas/internal/blobstore"
	"github.com/gpuaas/gpuaas/internal/config"
	"github.com/gpuaas/gpuaas/internal/registry"
	"github.com/gpuaas/gpuaas/internal/sealer"
	"github.com/gpuaas/gpuaas/internal/store"
)

// artifactParts is what the artifacts domain needs before the listener's
// address is known: the blob store and the shared registry token keys.
type artifactParts struct {
	blobs      *blobstore.Store
	keys       *registry.KeySet
	httpSecret string
	registry   *registry.Registry
	// sigTags is the lock replicas share on signature tags (nil on
	// SQLite): verification and the registry's content gate both hold it,
	// through the artifacts service.
	sigTags registry.SignatureTagLocker
	sealer  *sealer.Sealer // opens the registry token keys on reload
}

func newArtifactParts(ctx context.Context, db *store.DB, seal *sealer.Sealer, cfg config.Config, masterKey []byte, now func() time.Time) (*artifactParts, error) {
	blobDir := cfg.BlobDir
	if blobDir == "" {
		blobDir = filepath.Join(cfg.DataDir, "blobs")
	}
	blobs, err := blobstore.New(blobDir, blobstore.Options{MaxObjectSize: cfg.MaxBlobBytes, Clock: now})
	if err != nil {
		return nil, fmt.Errorf("blob store: %w", err)
	}
	keys, err := artifacts.LoadRegistryKeys(ctx, db.Queries(), seal, now)
	if err != nil {
		return nil, err
	}
	// Replicas share the master key, so they derive the same upload-state secret.
	return &artifactParts{blobs: blobs, keys: keys, sealer: seal, httpSecret: hex.EncodeToString(subkey(masterKey, "gpuaas registry http secret")),
		sigTags: store.SignatureTagLocks(db)}, nil
}

// startRegistry builds the registry once the public address is final: its
// host and token realm follow PublicURL (the API listener serves /v2/).
func (a *App) startRegistry() error {
	if a.artifacts == nil || a.artifacts.registry != nil {
		return nil
	}
	pub, err := url.Parse(a.Config.PublicURL)
	if err != nil || pub.Host == "" {
		return fmt.Errorf("--public-url %q: want an absolute URL", a.Config.PublicURL)
	}
	// Now stays the wall clock: the embedded distribution registry checks
	// the times of the tokens it is handed by the wall clock.
	cfg := registry.Config{
		Host:        pub.Host,
		Realm:       a.Config.PublicURL + registry.TokenPath,
		TokenTTL:    a.Config.RegistryTokenTTL,
		ExternalURL: a.Config.RegistryURL,
		HTTPSecret:  a.artifacts.httpSecret,
		Keys:        a.artifacts.keys,
		// Another replica may have rotated: the periodic reload would
		// catch up, but a token of the new key should not wait for it.
		OnUnknownKey: a.reloadRegistryKeysIfStale,
	}
	host, insecure := pub.Host, pub.Scheme == "http"
	if cfg.ExternalURL != "" {
		ext, err := url.Parse(cfg.ExternalURL)
		if err != nil || ext.Host == "" {
			return fmt.Errorf("--registry-url %q: want an absolute URL", cfg.ExternalURL)
		}
		host, insecure = ext.Host, ext.Scheme == "http"
	} else {
		cfg.RootDir = a.Config.RegistryRoot()
	}
	reg, err := registry.New(context.Background(), cfg, a.API.Artifacts.RegistryAuthorizer(), a.Logger)
	if err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	a.artifacts.registry = reg
	a.API.Artifacts.AttachRegistry(reg, host, insecure)
	if a.API.Mounts == nil {
		a.API.Mounts = map[string]http.Handler{}
	}
	a.API.Mounts["/v2/"] = reg.Handler()
	return nil
}

func (a *App) closeRegistry() error {
	if a.artifacts == nil || a.artifacts.registry == nil {
		return nil
	}
	return a.artifacts.registry.Close()
}

// RegistryHost is the host[:port] clients push to and pull from.
func (a *App) RegistryHost() string {
	if a.Config.RegistryURL != "" {
		if u, err := url.Parse(a.Config.RegistryURL); err == nil && u.Host != "" {
			return u.Host
		}
	}
	if u, err := url.Parse(a.Config.PublicURL); err == nil {
		return u.Host
	}
	return ""
}

// Registry is the registry the server runs or links to (nil before
// Listen). No credential the platform issues grants delete; a test, like
// an operator's tooling, signs such a token with its TokenHandler.
func (a *App) Registry() *registry.Registry { return a.artifacts.registry }
