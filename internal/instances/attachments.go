package instances

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/manifest"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// Shared instances. A launch whose effective control_plane_scope is
// tenant (the manifest supports it and the project's entitlement allows it)
// makes an instance of the org rather than of one project: it runs on an
// allocation of the project it was launched in (its home), and the org's
// admins attach other projects of the org to it. A member of an attached
// project reads it, its timeline, members and logs, and opens its UI,
// through its own project; a project that is not attached does not see it.
// Only org-level roles create or change it (upgrade, rollback,
// decommission, members, attachments): a project role, even the home
// project's operator, only reads it.
//
// A platform-managed instance (operating_mode platform_managed, scope
// platform; never the default, and only for apps whose manifest supports
// it) is the same with the platform as owner: platform admins launch and
// change it, in a project of their own, and attach tenants' projects of any
// org to it.

// Events of attachments.
const (
	EventProjectAttached = "apps.instance.project_attached"
	EventProjectDetached = "apps.instance.project_detached"
)

// Error codes of shared instances.
const (
	codeOrgRoleRequired      = "org_role_required"
	codePlatformRoleRequired = "platform_role_required"
	codeNotTenantShared      = "not_tenant_shared"
)

// tenantShared reports whether an instance is shared beyond its project:
// by its org (control_plane_scope tenant) or by the platform
// (platform_managed).
func tenantShared(inst AppInstance) bool {
	return inst.ControlPlaneScope == manifest.ScopeTenant || platformManaged(inst.OperatingMode)
}

func platformManaged(mode string) bool { return mode == manifest.ModePlatformManaged }

// sharedRole requires perm where a shared instance (or a launch of one) is
// owned: at its org for control_plane_scope tenant, at the platform for a
// platform-managed one. A project role is not enough.
func (s *Service) sharedRole(ctx context.Context, g *iam.Grants, orgID, mode, instanceID, perm string) error {
	err := sharedRoleRefusal(g, orgID, mode, instanceID, perm)
	if err != nil {
		_ = s.IAM.Deny(ctx, perm, sharedScope(orgID, mode), "app_instance", instanceID) // records the refused attempt
	}
	return err
}

// sharedScope is where a shared instance of org in mode is owned: the
// platform for a platform-managed one, else the org.
func sharedScope(orgID, mode string) iam.Scope {
	if platformManaged(mode) {
		return iam.Scope{}
	}
	return iam.Scope{OrgID: orgID}
}

// sharedRoleRefusal is sharedRole's answer, without recording anything.
func sharedRoleRefusal(g *iam.Grants, orgID, mode, instanceID, perm string) error {
	owner, code := "org "+orgID+" (an org admin)", codeOrgRoleRequired
	what := "instance " + instanceID + " is shared by its org (control_plane_scope tenant)"
	if platformManaged(mode) {
		owner, code = "the platform (a platform admin)", codePlatformRoleRequired
		what = "instance " + instanceID + " is platform-managed"
	}
	if g.Can(perm, sharedScope(orgID, mode)) {
		return nil
	}
	if instanceID == "" {
		what = "this launch makes a shared instance"
	}
	return errdefs.PermissionDenied(code, "%s: it is launched and changed only with %q at %s; project roles only read it", what, perm, owner)
}

// AttachInput is the body of an attach.
type AttachInput struct {
	ProjectID string `json:"project_id"`
}

// Attach lets another project of the org use a tenant-shared instance.
// Attaching again answers the attachment.
func (s *Service) Attach(ctx context.Context, g *iam.Grants, projectID, id string, in AttachInput) (Attachment, error) {
	_, inst, err := s.instance(ctx, g, projectID, id, iam.PermInstanceUpdate)
	if err != nil {
		return Attachment{}, err
	}
	if !tenantShared(inst) {
		return Attachment{}, errdefs.FailedPrecondition(codeNotTenantShared,
			"instance %s belongs to project %s (control_plane_scope %s); only an instance launched with control_plane_scope tenant, or a platform-managed one, is shared with other projects", inst.ID, inst.ProjectID, inst.ControlPlaneScope)
	}
	target := strings.TrimSpace(in.ProjectID)
	p, err := s.Store.Read().GetProject(ctx, target)
	if errors.Is(err, storage.ErrNotFound) || (err == nil && p.OrgID != inst.OrgID && !platformManaged(inst.OperatingMode)) {
		return Attachment{}, errdefs.Validation([]errdefs.FieldError{{Field: "/project_id", Code: CodeNotFound,
			Message: fmt.Sprintf("org %s has no project %q; an org's shared instance is attached to projects of its own org (a platform-managed one to any tenant's)", inst.OrgID, target)}})
	}
	if err != nil {
		return Attachment{}, err
	}
	if target == inst.ProjectID {
		return Attachment{}, errdefs.Validation([]errdefs.FieldError{{Field: "/project_id", Code: "home_project",
			Message: fmt.Sprintf("project %s is the instance's home; it needs no attachment", target)}})
	}
	a := Attachment{InstanceID: inst.ID, ProjectID: target, OrgID: p.OrgID, AttachedBy: principal.From(ctx).Key(), CreatedAt: s.Now().UTC()}
	err = s.Store.Mutate(ctx, func(tx Tx) error {
		// Looked up first: a failed insert would end a PostgreSQL
		// transaction, and the repeat is still recorded.
		if attached, err := tx.InstanceAttached(ctx, inst.ID, target); err != nil {
			return err
		} else if attached {
			return tx.Audit(storage.AuditEvent{Action: "app_instance.attach", ResourceType: "app_instance", ResourceID: inst.ID,
				OrgID: inst.OrgID, ProjectID: inst.ProjectID, Reason: "already_attached: " + target}, nil, nil)
		}
		if err := tx.InsertInstanceAttachment(ctx, a); err != nil {
			return err
		}
		if err := s.record(ctx, tx, inst, InstanceOperation{}, EventProjectAttached, &extra{project: target}); err != nil {
			return err
		}
		return tx.Audit(storage.AuditEvent{Action: "app_instance.attach", ResourceType: "app_instance", ResourceID: inst.ID,
			OrgID: inst.OrgID, ProjectID: inst.ProjectID, Reason: "project " + target + " may use the shared instance"}, nil,
			map[string]any{"attached_project_id": target})
	})
	return a, err
}

// Detach takes a project's use of a shared instance away; its members stop
// seeing the instance at once.
func (s *Service) Detach(ctx context.Context, g *iam.Grants, projectID, id, target string) error {
	_, inst, err := s.instance(ctx, g, projectID, id, iam.PermInstanceUpdate)
	if err != nil {
		return err
	}
	return s.Store.Mutate(ctx, func(tx Tx) error {
		if err := tx.DeleteInstanceAttachment(ctx, inst.ID, target); errors.Is(err, storage.ErrNotFound) {
			return errdefs.NotFound("attachment_not_found", "project %q is not attached to instance %s", target, inst.ID)
		} else if err != nil {
			return err
		}
		if err := s.record(ctx, tx, inst, InstanceOperation{}, EventProjectDetached, &extra{project: target}); err != nil {
			return err
		}
		return tx.Audit(storage.AuditEvent{Action: "app_instance.detach", ResourceType: "app_instance", ResourceID: inst.ID,
			OrgID: inst.OrgID, ProjectID: inst.ProjectID, Reason: "project " + target}, map[string]any{"attached_project_id": target}, nil)
	})
}

// Attachments lists the projects attached to an instance. Its owner (a
// reader at its org, or at the platform for a platform-managed one) sees
// every attachment; anyone else, reading it through a project, sees those
// of that project's org only: the other tenants a platform-managed
// instance serves are not theirs to know.
func (s *Service) Attachments(ctx context.Context, g *iam.Grants, projectID, id string) ([]Attachment, error) {
	p, inst, err := s.instance(ctx, g, projectID, id, iam.PermInstanceRead)
	if err != nil {
		return nil, err
	}
	all, err := s.Store.Read().ListInstanceAttachments(ctx, inst.ID)
	if err != nil || g.Can(iam.PermInstanceRead, ownerScope(inst)) {
		return all, err
	}
	out := []Attachment{}
	for _, a := range all {
		if a.OrgID == p.OrgID {
			out = append(out, a)
		}
	}
	return out, nil
}

// ownerScope is where an instance is owned (sharedScope).
func ownerScope(inst AppInstance) iam.Scope { return sharedScope(inst.OrgID, inst.OperatingMode) }
