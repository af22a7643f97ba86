package iam

import (
	"context"
	"errors"
	"time"

	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// AddMemberInput grants a role to a user at an org or project.
type AddMemberInput struct {
	UserID string `json:"user_id"`
	Role   string `json:"role"`
}

// Bind grants role to a principal at a scope inside an open mutation. It is
// shared by memberships and service accounts so the rules live in one place.
// The caller records the audit row of the mutation as a whole; at is the
// binding's creation time (the caller's clock).
func Bind(ctx context.Context, tx Binder, at time.Time, principalType principal.Type, principalID, role, scopeType, scopeID, orgID string) (RoleBinding, error) {
	if !KnownRole(role) {
		return RoleBinding{}, errdefs.Validation([]errdefs.FieldError{{Field: "/role", Code: "unknown_role",
			Message: "unknown role; use one of " + joinRoles()}})
	}
	return bind(ctx, tx, at, principalType, principalID, role, scopeType, scopeID, orgID)
}

// BindWorkload binds the platform's own instance_workload role to an app
// instance's service account in its project: the one way that role is
// granted.
func BindWorkload(ctx context.Context, tx Binder, at time.Time, serviceAccountID, projectID, orgID string) (RoleBinding, error) {
	return bind(ctx, tx, at, principal.ServiceAccount, serviceAccountID, RoleInstanceWorkload, ScopeProject, projectID, orgID)
}

func bind(ctx context.Context, tx Binder, at time.Time, principalType principal.Type, principalID, role, scopeType, scopeID, orgID string) (RoleBinding, error) {
	if _, ok := roles[role]; !ok {
		return RoleBinding{}, errdefs.Validation([]errdefs.FieldError{{Field: "/role", Code: "unknown_role",
			Message: "unknown role; use one of " + joinRoles()}})
	}
	if !RoleBindableAt(role, scopeType) {
		return RoleBinding{}, errdefs.Validation([]errdefs.FieldError{{Field: "/role", Code: "role_not_bindable_here",
			Message: "role " + role + " cannot be granted at " + scopeType + " scope"}})
	}
	b := RoleBinding{ID: NewID(), PrincipalType: string(principalType), PrincipalID: principalID, Role: role,
		ScopeType: scopeType, ScopeID: scopeID, OrgID: orgID, CreatedAt: at}
	if err := tx.CreateRoleBinding(ctx, b); err != nil {
		if errors.Is(err, storage.ErrAlreadyExists) {
			return RoleBinding{}, errdefs.AlreadyExists("binding_exists", "that principal already holds role %s here", role)
		}
		return RoleBinding{}, err
	}
	return b, nil
}

func projectOf(scopeType, scopeID string) string {
	if scopeType == ScopeProject {
		return scopeID
	}
	return ""
}

func joinRoles() string {
	out := ""
	for i, r := range RoleNames() {
		if i > 0 {
			out += ", "
		}
		out += r
	}
	return out
}

// AddMember grants a user a role at an org (scopeType org) or project.
func (s *Service) AddMember(ctx context.Context, g *Grants, scopeType, scopeID string, in AddMemberInput) (RoleBinding, error) {
	orgID, err := s.memberScope(ctx, g, scopeType, scopeID, true)
	if err != nil {
		return RoleBinding{}, err
	}
	if in.Role == RolePlatformAdmin {
		return RoleBinding{}, errdefs.Validation([]errdefs.FieldError{{Field: "/role", Code: "role_not_bindable_here", Message: "platform_admin is granted at platform scope only"}})
	}
	var b RoleBinding
	err = s.Store.Mutate(ctx, func(tx Tx) error {
		if _, err := tx.GetUser(ctx, in.UserID); err != nil {
			if errors.Is(err, storage.ErrNotFound) {
				return errdefs.Validation([]errdefs.FieldError{{Field: "/user_id", Code: "user_not_found", Message: "no user has this id"}})
			}
			return err
		}
		var err error
		if b, err = Bind(ctx, tx, s.now(), principal.User, in.UserID, in.Role, scopeType, scopeID, orgID); err != nil {
			return err
		}
		return tx.Audit(storage.AuditEvent{Action: "role_binding.create", ResourceType: "role_binding", ResourceID: b.ID,
			OrgID: orgID, ProjectID: projectOf(scopeType, scopeID)}, nil, b)
	})
	return b, err
}

// memberScope checks access to a membership scope and returns its org id.
func (s *Service) memberScope(ctx context.Context, g *Grants, scopeType, scopeID string, write bool) (string, error) {
	if scopeType == ScopeOrg {
		perm := PermOrgsRead
		if write {
			perm = PermOrgMembersWrite
		}
		o, err := s.Org(ctx, g, scopeID, perm)
		return o.ID, err
	}
	perm := PermProjectsRead
	if write {
		perm = PermProjectMembersRW
	}
	p, err := s.Project(ctx, g, scopeID, perm)
	return p.OrgID, err
}

// ListMembers lists the bindings made at a scope.
func (s *Service) ListMembers(ctx context.Context, g *Grants, scopeType, scopeID string, p storage.Page) ([]RoleBinding, string, error) {
	if _, err := s.memberScope(ctx, g, scopeType, scopeID, false); err != nil {
		return nil, "", err
	}
	return s.Store.Read().BindingsAtScope(ctx, scopeType, scopeID, p)
}

// RemoveMember deletes a binding made at a scope.
func (s *Service) RemoveMember(ctx context.Context, g *Grants, scopeType, scopeID, bindingID string) error {
	orgID, err := s.memberScope(ctx, g, scopeType, scopeID, true)
	if err != nil {
		return err
	}
	err = s.Store.Mutate(ctx, func(tx Tx) error {
		b, err := tx.GetRoleBinding(ctx, bindingID)
		if errors.Is(err, storage.ErrNotFound) || (err == nil && (b.ScopeType != scopeType || b.ScopeID != scopeID)) {
			return errdefs.NotFound("binding_not_found", "no role binding %q at this scope", bindingID)
		}
		if err != nil {
			return err
		}
		if platformRoles[b.Role] {
			// As no one binds such a role through the API, no one removes
			// it: an app instance's identity would lose its own instance
			// and its usage reports with it.
			return errdefs.FailedPrecondition("managed_by_platform",
				"role binding %s gives %s %s the %q role, which the platform binds and removes itself (an app instance's own identity, until the instance is decommissioned)", b.ID, b.PrincipalType, b.PrincipalID, b.Role)
		}
		if err := tx.DeleteRoleBinding(ctx, b.ID); err != nil {
			return err
		}
		return tx.Audit(storage.AuditEvent{Action: "role_binding.delete", ResourceType: "role_binding", ResourceID: b.ID,
			OrgID: orgID, ProjectID: projectOf(scopeType, scopeID)}, b, nil)
	})
	if err == nil {
		s.AccessChanged()
	}
	return err
}
