package artifacts

import (
	"context"
	"sync"
	"time"

	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/registry"
	"github.com/gpuaas/gpuaas/internal/sealer"
)

// RegistryKeyReloader keeps a registry's token keys in step with the
// database, as the Keyring does for access tokens: the server reloads it
// periodically, and the registry asks it (ReloadIfStale) when handed a
// token of a key it does not hold.
type RegistryKeyReloader struct {
	DB     iam.KeyStore
	Sealer *sealer.Sealer
	Now    func() time.Time // stamps the audit rows of keys it reseals
	// Registry is the registry to hand the keys to; nil (not built yet)
	// reloads nothing.
	Registry func() *registry.Registry

	// reloading serializes reloads, so that a slow read cannot hand the
	// registry a set older than the one a later read handed it.
	reloading sync.Mutex
	mu        sync.Mutex
	// lastReload is when the keys were last read, by the wall clock: it
	// only throttles reloads, and is never stored or compared with a
	// stamped time.
	lastReload time.Time
}

// Reload reads the registry token keys again and hands them to the
// registry.
func (r *RegistryKeyReloader) Reload(ctx context.Context) error {
	reg := r.Registry()
	if reg == nil {
		return nil
	}
	r.reloading.Lock()
	defer r.reloading.Unlock()
	return r.reload(ctx, reg, time.Now())
}

// reload reads the keys, begun at began by the wall clock, and hands them
// to reg; the caller holds r.reloading.
func (r *RegistryKeyReloader) reload(ctx context.Context, reg *registry.Registry, began time.Time) error {
	r.mu.Lock()
	r.lastReload = began
	r.mu.Unlock()
	ks, err := RegistryKeySet(ctx, r.DB, r.Sealer, r.Now)
	if err != nil {
		return err
	}
	return reg.SetKeys(ks)
}

// ReloadIfStale reloads unless the keys were read within the last few
// seconds, so that a flood of tokens naming unknown keys cannot turn into a
// flood of database reads.
func (r *RegistryKeyReloader) ReloadIfStale(ctx context.Context) {
	fresh := func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return time.Since(r.lastReload) < iam.ReloadEvery
	}
	reg := r.Registry()
	if reg == nil || fresh() {
		return
	}
	r.reloading.Lock()
	defer r.reloading.Unlock()
	if fresh() { // read by the caller this one waited for: a burst reads once
		return
	}
	_ = r.reload(ctx, reg, time.Now())
}
