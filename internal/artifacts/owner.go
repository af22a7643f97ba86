package artifacts

import (
	"context"
	"errors"
	"strings"

	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/nodes"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/serviceaccounts"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// Registry credentials die with their owner: every registry token request
// re-checks the principal bound to the credential's intent — still present,
// still active, still holding the permission on the project — exactly as
// the REST API re-checks a bearer token on every request.

// ownerMay reports whether the principal named by key (principal.Key form)
// exists, is active and holds perm in the intent's project.
func ownerMay(ctx context.Context, q OwnerReader, key string, it ArtifactIntent, perm string) (bool, error) {
	typ, id, ok := strings.Cut(key, ":")
	if !ok || id == "" {
		return false, nil
	}
	var p principal.Principal
	switch principal.Type(typ) {
	case principal.User:
		u, err := q.GetUser(ctx, id)
		if errors.Is(err, storage.ErrNotFound) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if u.Status != iam.UserActive {
			return false, nil
		}
		p = principal.Principal{Type: principal.User, ID: u.ID, Email: u.Email}
	case principal.ServiceAccount:
		a, err := q.ArtifactOwnerAccount(ctx, id)
		if errors.Is(err, storage.ErrNotFound) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if a.Status != serviceaccounts.AccountActive {
			return false, nil
		}
		p = principal.Principal{Type: principal.ServiceAccount, ID: a.ID, OrgID: a.OrgID, ProjectID: a.ProjectID}
	case principal.Node:
		// A node holds pull credentials minted for one task's image; it
		// may use them while it is a member of the fleet, and never push.
		state, err := q.ArtifactOwnerNodeState(ctx, id)
		if errors.Is(err, storage.ErrNotFound) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		return state != nodes.StateRemoved && perm == iam.PermArtifactRead, nil
	default:
		return false, nil
	}
	g, err := iam.LoadGrants(ctx, q, p)
	if err != nil {
		return false, err
	}
	return g.Can(perm, iam.Scope{OrgID: it.OrgID, ProjectID: it.ProjectID}), nil
}

// credentialPerm is the permission a credential's actions need.
func credentialPerm(actions string) string {
	for _, a := range strings.Split(actions, ",") {
		if a == "push" {
			return iam.PermArtifactWrite
		}
	}
	return iam.PermArtifactRead
}
