// Package engine is the Docker Engine implementation of the agent's driver
// seam (agent/driver): containers through agent/docker, Compose projects
// through agent/compose, orphan reconcile and image prune.
package engine

import (
	"context"

	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/agent/compose"
	"github.com/gpuaas/gpuaas/internal/agent/docker"
	"github.com/gpuaas/gpuaas/internal/agent/driver"
	mclient "github.com/moby/moby/client"
)

// Docker runs a node's workloads on the local Docker engine.
type Docker struct {
	*docker.Driver
	rec   *docker.Reconciler
	prune *docker.ImagePruner
}

var _ driver.Driver = (*Docker)(nil)

// New connects to the engine named by the environment (DOCKER_HOST or the
// default socket); it is a driver.New.
func New(cfg driver.Config) (driver.Driver, error) {
	d, err := docker.New(docker.Config{HostAddress: cfg.HostAddress, DataDir: cfg.DataDir, Unwrap: cfg.Unwrap, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	return Wrap(d, cfg), nil
}

// Wrap puts an existing docker.Driver behind the seam.
func Wrap(d *docker.Driver, cfg driver.Config) *Docker {
	return &Docker{Driver: d, rec: &docker.Reconciler{D: d, Grace: cfg.OrphanGrace, Known: cfg.Known},
		prune: &docker.ImagePruner{D: d, Grace: cfg.ImagePruneGrace, Held: cfg.Held, RemoveUnheld: cfg.RemoveUnheld}}
}

// Engine reads the engine's version, API version and runtimes.
func (e *Docker) Engine(ctx context.Context) (driver.Engine, error) {
	v, err := e.C.ServerVersion(ctx, mclient.ServerVersionOptions{})
	if err != nil {
		return driver.Engine{}, err
	}
	out := driver.Engine{Version: v.Version, APIVersion: e.C.ClientVersion()}
	if info, err := e.C.Info(ctx, mclient.InfoOptions{}); err == nil {
		for name := range info.Info.Runtimes {
			out.Runtimes = append(out.Runtimes, name)
		}
	}
	return out, nil
}

// Remove removes the referenced containers; a removal of the whole instance
// (no container named) takes its scratch path and platform files too:
// decommission's last step, which Verify then checks.
func (e *Docker) Remove(ctx context.Context, ref nodeapi.ContainerRef) error {
	if err := e.Driver.Remove(ctx, ref); err != nil {
		return err
	}
	if ref.ContainerID == "" && ref.Name == "" {
		return e.RemoveInstanceDir(ref.InstanceID)
	}
	return nil
}

// ComposeImages lists the images a Compose project pulls or uses.
func (e *Docker) ComposeImages(ctx context.Context, u nodeapi.ComposeUp) ([]string, error) {
	return compose.Images(ctx, u)
}

// Up starts a Compose project.
func (e *Docker) Up(ctx context.Context, o driver.Owner, u nodeapi.ComposeUp) (nodeapi.RunOutput, error) {
	return compose.Up(ctx, e.Driver, o, u)
}

// Down removes a Compose project.
func (e *Docker) Down(ctx context.Context, project, instanceID string) error {
	return compose.Down(ctx, e.Driver, project, instanceID)
}

// Housekeep removes orphans past their grace, then images no container
// has used for theirs.
func (e *Docker) Housekeep(ctx context.Context) (driver.Housekeeping, error) {
	res, err := e.rec.Run(ctx)
	// What the pass removed before it failed is reported too.
	out := driver.Housekeeping{Removed: res.Removed, RemovedNetworks: res.RemovedNetworks, RemovedVolumes: res.RemovedVolumes}
	if err != nil {
		return out, err
	}
	out.PrunedImages, err = e.prune.Run(ctx)
	return out, err
}
