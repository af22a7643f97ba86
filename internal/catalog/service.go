package catalog

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpuaas/gpuaas/internal/clock"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/manifest"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// ArtifactGate decides whether every artifact a version references is ready
// for the version to be published: registered, active and verified. The
// artifacts domain implements it. It runs inside the publish transaction
// (tx, which the artifacts domain reads through its own view of it) and
// returns nil when publishing may proceed, or an errdefs error
// (FailedPrecondition) naming the artifacts that are not ready.
type ArtifactGate interface {
	VersionArtifactsReady(ctx context.Context, tx storage.Tx, appSlug, version string, expected []manifest.Artifact) error
}

// InstanceGate counts the live (not decommissioned) app instances running a
// version. The instances domain implements it, reading inside the retire
// transaction (tx) through its own view of it; retiring a version is
// refused while the count is above zero.
type InstanceGate interface {
	LiveInstances(ctx context.Context, tx storage.Tx, appSlug, version string) (int, error)
}

// Deps are what the catalog service needs. ArtifactGate and InstanceGate
// may be nil: without an artifact registry a version that references
// artifacts cannot be published (nothing can vouch for them), and without
// an instances domain no instance can exist, so retiring is never blocked.
type Deps struct {
	Store        Store
	IAM          *iam.Service
	Logger       *slog.Logger
	Now          func() time.Time
	ArtifactGate ArtifactGate
	InstanceGate InstanceGate
}

// Service is the catalog domain: apps, versions, manifests, entitlements.
type Service struct {
	Deps
	artifacts     atomic.Pointer[ArtifactGate]
	gatesMu       sync.Mutex
	instanceGates []InstanceGate
}

// NewService builds the service.
func NewService(d Deps) *Service {
	d.Now = clock.Or(d.Now)
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Service{Deps: d}
	s.SetArtifactGate(d.ArtifactGate)
	if d.InstanceGate != nil {
		s.AddInstanceGate(d.InstanceGate)
	}
	return s
}

// SetArtifactGate replaces the artifact gate the service was built with:
// tests that publish without a registry use it; the wiring passes the
// gate in Deps.
func (s *Service) SetArtifactGate(g ArtifactGate) { s.artifacts.Store(&g) }

// AddInstanceGate adds a domain that can hold a version in use: the
// instances domain is built after the catalog (it resolves launches
// through it), so it registers here. Every gate is asked; none replaces
// another.
func (s *Service) AddInstanceGate(g InstanceGate) {
	s.gatesMu.Lock()
	defer s.gatesMu.Unlock()
	s.instanceGates = append(s.instanceGates, g)
}

func (s *Service) artifactGate() ArtifactGate {
	if p := s.artifacts.Load(); p != nil {
		return *p
	}
	return nil
}

func (s *Service) instanceGateList() []InstanceGate {
	s.gatesMu.Lock()
	defer s.gatesMu.Unlock()
	return s.instanceGates
}
