// Package iam holds identity and access: orgs, projects, users, roles made
// of permission keys, the one policy check, passwords and access tokens.
package iam

import "sort"

// Permission keys are dot-named: <domain>.<resource>.<verb>.
const (
	PermOrgsRead          = "orgs.read"
	PermOrgsCreate        = "orgs.create"
	PermOrgMembersWrite   = "orgs.members.write"
	PermProjectsRead      = "projects.read"
	PermProjectsCreate    = "projects.create"
	PermProjectMembersRW  = "projects.members.write"
	PermUsersRead         = "users.read"
	PermUsersWrite        = "users.write"
	PermAuditRead         = "audit.read"
	PermSARead            = "service_accounts.read"
	PermSAWrite           = "service_accounts.write"
	PermCatalogRead       = "apps.catalog.read"
	PermManifestWrite     = "apps.manifest.write"
	PermVersionPublish    = "apps.version.publish"
	PermEntitlementRead   = "apps.entitlement.read"
	PermEntitlementWrite  = "apps.entitlement.write"
	PermInstanceRead      = "apps.instance.read"
	PermInstanceCreate    = "apps.instance.create"
	PermInstanceUpdate    = "apps.instance.update"
	PermInstanceDelete    = "apps.instance.delete"
	PermArtifactRead      = "apps.artifact.read"
	PermArtifactWrite     = "apps.artifact.write"
	PermArtifactPromote   = "apps.artifact.promote"
	PermArtifactRevoke    = "apps.artifact.revoke"
	PermSigningKeysWrite  = "apps.signing_key.write"
	PermBillingUsageRead  = "billing.usage.read"
	PermRegistryInfoRead  = "apps.registry.read"
	PermEventsRead        = "events.read"
	PermPlatformAdminOnly = "platform.admin"
	// Nodes and allocations: nodes.* and allocations.write are held only by
	// platform admins; allocations.read is a project read.
	PermNodesRead        = "nodes.read"
	PermNodesWrite       = "nodes.write"
	PermAllocationsRead  = "allocations.read"
	PermAllocationsWrite = "allocations.write"
	// Billing (issue 13). Reporting usage is further bound to identity: only
	// an app instance's own service account reports for that instance.
	PermBillingUsageReport   = "billing.usage.report"
	PermBillingBudgetWrite   = "billing.budget.write"
	PermBillingBreakdownRead = "billing.breakdown.read" // operators: cost by source and meter
	PermBillingPricesWrite   = "billing.prices.write"
	PermBillingLedgerCorrect = "billing.ledger.correct"
	// PermInstanceSelfRead lets an app instance's own identity read that
	// one instance (whose service_account_id is the caller), nothing else.
	PermInstanceSelfRead = "apps.instance.self.read"
	// PermInstanceSelfReport lets an app instance's own identity report
	// runtime events (heartbeat, health, members) for that one instance.
	PermInstanceSelfReport = "apps.instance.self.report"
	// PermReleasePublish uploads and publishes the platform's own releases
	// (issue 21); held only by platform admins.
	PermReleasePublish = "platform.release.publish"
)

// Role names of the built-in roles.
const (
	RolePlatformAdmin = "platform_admin"
	RoleOrgAdmin      = "org_admin"
	RoleProjectAdmin  = "project_admin"
	RoleProjectMember = "project_member"
	RoleProjectViewer = "project_viewer"
	RoleAppOperator   = "app_operator"
	// RoleInstanceWorkload is the role of an app instance's own identity:
	// read its own instance and report its own usage. The platform binds it
	// when it provisions the identity; nobody can grant it (KnownRole).
	RoleInstanceWorkload = "instance_workload"
	permissionWildcard   = "*"
)

var viewerPerms = []string{
	PermProjectsRead, PermCatalogRead, PermEntitlementRead, PermInstanceRead,
	PermArtifactRead, PermBillingUsageRead, PermRegistryInfoRead, PermAllocationsRead, PermEventsRead,
}

var operatorPerms = append([]string{
	PermInstanceCreate, PermInstanceUpdate, PermInstanceDelete, PermArtifactWrite, PermBillingUsageReport,
}, viewerPerms...)

var memberPerms = append([]string{PermSARead}, operatorPerms...)

var projectAdminPerms = append([]string{
	PermProjectMembersRW, PermSAWrite, PermEntitlementWrite, PermArtifactPromote,
	PermArtifactRevoke, PermSigningKeysWrite, PermAuditRead,
}, memberPerms...)

var orgAdminPerms = append([]string{PermOrgsRead, PermOrgMembersWrite, PermProjectsCreate, PermBillingBudgetWrite}, projectAdminPerms...)

// roles maps each built-in role to its permission keys.
var roles = map[string][]string{
	RolePlatformAdmin: {permissionWildcard},
	RoleOrgAdmin:      orgAdminPerms,
	RoleProjectAdmin:  projectAdminPerms,
	RoleProjectMember: memberPerms,
	RoleProjectViewer: viewerPerms,
	RoleAppOperator:   operatorPerms,
	// Usage reporting is further bound to the instance (billing checks the
	// caller is the instance's own account).
	RoleInstanceWorkload: {PermInstanceSelfRead, PermInstanceSelfReport, PermBillingUsageReport},
}

// platformRoles are bound by the platform itself, never through the API.
var platformRoles = map[string]bool{RoleInstanceWorkload: true}

// scopesOfRole says where a role may be bound: project roles at a project
// (or an org, applying to all its projects), org_admin at an org, and
// platform_admin only at the platform.
var scopesOfRole = map[string][]string{
	RolePlatformAdmin:    {ScopePlatform},
	RoleOrgAdmin:         {ScopeOrg},
	RoleProjectAdmin:     {ScopeOrg, ScopeProject},
	RoleProjectMember:    {ScopeOrg, ScopeProject},
	RoleProjectViewer:    {ScopeOrg, ScopeProject},
	RoleAppOperator:      {ScopeOrg, ScopeProject},
	RoleInstanceWorkload: {ScopeProject},
}

// Scope types of a role binding.
const (
	ScopePlatform = "platform"
	ScopeOrg      = "org"
	ScopeProject  = "project"
)

// KnownRole reports whether name is a built-in role a person or a service
// account may be granted (the platform's own roles are not).
func KnownRole(name string) bool { _, ok := roles[name]; return ok && !platformRoles[name] }

// RoleBindableAt reports whether role may be bound at scopeType.
func RoleBindableAt(role, scopeType string) bool {
	for _, s := range scopesOfRole[role] {
		if s == scopeType {
			return true
		}
	}
	return false
}

// RolePermissions returns the permission keys of a role, sorted.
func RolePermissions(role string) []string {
	ps := append([]string(nil), roles[role]...)
	sort.Strings(ps)
	return ps
}

// RoleNames lists the built-in roles, sorted.
func RoleNames() []string {
	out := make([]string, 0, len(roles))
	for r := range roles {
		if platformRoles[r] {
			continue
		}
		out = append(out, r)
	}
	sort.Strings(out)
	return out
}

func roleHas(role, perm string) bool {
	for _, p := range roles[role] {
		if p == perm || p == permissionWildcard {
			return true
		}
	}
	return false
}
