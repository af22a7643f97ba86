package artifacts

import (
	"context"

	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/principal"
)

// RegistryInfo is the registry contract of this environment.
type RegistryInfo struct {
	Host               string
	Mode               string // embedded | external
	Insecure           bool
	NamespaceOwnership string
	RepositoryTemplate string
	DigestOnly         bool
	ProjectPrivate     bool
	TokenRealm         string
	TokenService       string
}

// Info describes the registry to any signed-in principal.
func (s *Service) Info(ctx context.Context, g *iam.Grants) (RegistryInfo, error) {
	if g == nil || principal.From(ctx).IsZero() {
		return RegistryInfo{}, errdefs.Unauthenticated("unauthenticated", "sign in to read the registry contract")
	}
	link, err := s.registry()
	if err != nil {
		return RegistryInfo{}, err
	}
	mode := "embedded"
	if link.reg.External() {
		mode = "external"
	}
	return RegistryInfo{
		Host: link.host, Mode: mode, Insecure: link.insecure, NamespaceOwnership: "platform_owned",
		RepositoryTemplate: RepositoryPrefix + "/{org_slug}/{project_slug}/{app_slug}",
		DigestOnly:         true, ProjectPrivate: true, TokenRealm: link.reg.Realm(), TokenService: link.host,
	}, nil
}
