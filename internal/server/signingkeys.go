package server

import (
	"context"
	"errors"
	"time"

	"github.com/gpuaas/gpuaas/internal/artifacts"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/registry"
	"github.com/gpuaas/gpuaas/internal/worker"
)

// SigningKeyReloadEvery is how often each replica reads its token signing
// keys again, so that a key an operator added or retired (gpuaas keys) is
// used, or refused, everywhere within it plus the worker's jitter, without
// a restart.
const SigningKeyReloadEvery = 60 * time.Second

// newSigningKeyReload is the job that reloads the access token keyring and
// the registry's token keys.
func (a *App) newSigningKeyReload(ring *iam.Keyring) *worker.Periodic {
	a.registryKeys = &artifacts.RegistryKeyReloader{DB: a.DB.Queries(), Sealer: a.artifacts.sealer, Now: a.now,
		Registry: func() *registry.Registry { return a.artifacts.registry }}
	return &worker.Periodic{Name: "signing-key-reload", Interval: SigningKeyReloadEvery, Logger: a.Logger,
		Run: func(ctx context.Context) error {
			return errors.Join(ring.Reload(ctx), a.registryKeys.Reload(ctx))
		}}
}

// SigningKeyReload is this replica's periodic reload of its token signing
// keys (tests kick it and wait on its runs rather than wait a minute).
func (a *App) SigningKeyReload() *worker.Periodic { return a.signingKeyReload }

// reloadRegistryKeysIfStale is the registry's ask when handed a token of
// a key it does not hold.
func (a *App) reloadRegistryKeysIfStale() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	a.registryKeys.ReloadIfStale(ctx)
}
