package iam

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"sort"

	"github.com/gpuaas/gpuaas/internal/principal"
)

// Scope is where an action happens. An empty ProjectID means org level; an
// empty OrgID too means platform level.
type Scope struct {
	OrgID     string
	ProjectID string
}

// Grants is everything a principal may do, loaded once per request.
type Grants struct {
	P        principal.Principal
	bindings []RoleBinding
}

// LoadGrants reads the role bindings of p.
func LoadGrants(ctx context.Context, q GrantReader, p principal.Principal) (*Grants, error) {
	g := &Grants{P: p}
	if p.Type != principal.User && p.Type != principal.ServiceAccount {
		return g, nil
	}
	bs, err := q.BindingsOfPrincipal(ctx, string(p.Type), p.ID)
	if err != nil {
		return nil, err
	}
	g.bindings = bs
	return g, nil
}

// Fingerprint names what g grants: two Grants with the same fingerprint
// answer every Can and Sees alike. The idempotency layer stores it with a
// keyed request and replays the stored answer only to a caller whose
// fingerprint is unchanged, so a member removed (or a viewer promoted)
// since the first request is not handed an answer made under other rights.
// Binding ids and times are left out: a role taken away and given back
// grants the same.
func (g *Grants) Fingerprint() string {
	if g == nil {
		return ""
	}
	lines := make([]string, 0, len(g.bindings))
	for _, b := range g.bindings {
		lines = append(lines, b.Role+"\x00"+b.ScopeType+"\x00"+b.ScopeID+"\x00"+b.OrgID)
	}
	sort.Strings(lines)
	h := sha256.New()
	// The principal's own confinement (a service account's project) is
	// part of what it may do.
	h.Write([]byte(string(g.P.Type) + "\x00" + g.P.ID + "\x00" + g.P.OrgID + "\x00" + g.P.ProjectID + "\n"))
	for _, l := range lines {
		h.Write([]byte(l + "\n"))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// covers reports whether binding b applies at scope s.
func covers(b RoleBinding, s Scope) bool {
	switch b.ScopeType {
	case ScopePlatform:
		return true
	case ScopeOrg:
		return s.OrgID != "" && b.ScopeID == s.OrgID
	case ScopeProject:
		return s.ProjectID != "" && b.ScopeID == s.ProjectID
	}
	return false
}

// confined is the hard fence around service accounts: whatever their
// bindings say, they act only inside their own project.
func (g *Grants) confined(s Scope) bool {
	if g.P.Type != principal.ServiceAccount {
		return false
	}
	return s.ProjectID == "" || s.ProjectID != g.P.ProjectID
}

// Can reports whether the principal holds perm at scope s. This is the one
// policy check every handler uses.
func (g *Grants) Can(perm string, s Scope) bool {
	if g == nil || g.confined(s) {
		return false
	}
	for _, b := range g.bindings {
		if covers(b, s) && roleHas(b.Role, perm) {
			return true
		}
	}
	return false
}

// Sees reports whether the principal may know that scope s exists at all.
// Outside what it sees, a principal gets "not found", never "forbidden", so
// ids of other tenants cannot be probed.
func (g *Grants) Sees(s Scope) bool {
	if g == nil || g.confined(s) {
		return false
	}
	for _, b := range g.bindings {
		if covers(b, s) {
			return true
		}
		// A project binding makes its org visible (to list its projects).
		if b.ScopeType == ScopeProject && s.ProjectID == "" && s.OrgID != "" && b.OrgID == s.OrgID {
			return true
		}
	}
	return false
}

// IsPlatformAdmin reports a platform-scope binding with every permission.
func (g *Grants) IsPlatformAdmin() bool { return g.Can(PermPlatformAdminOnly, Scope{}) }

// OrgIDs lists the orgs visible through bindings; nil means all (platform).
// Service accounts list no orgs: they work inside their project only.
func (g *Grants) OrgIDs() []string {
	if g.IsPlatformAdmin() {
		return nil
	}
	out := []string{}
	if g.P.Type == principal.ServiceAccount {
		return out
	}
	seen := map[string]bool{}
	for _, b := range g.bindings {
		if b.OrgID != "" && !seen[b.OrgID] {
			seen[b.OrgID] = true
			out = append(out, b.OrgID)
		}
	}
	return out
}

// ProjectIDsIn lists the projects of an org visible through project
// bindings; nil means every project of the org (an org or platform binding).
func (g *Grants) ProjectIDsIn(orgID string) []string {
	out := []string{}
	if g.P.Type == principal.ServiceAccount {
		if g.P.OrgID == orgID {
			out = append(out, g.P.ProjectID)
		}
		return out
	}
	for _, b := range g.bindings {
		if b.ScopeType == ScopePlatform || (b.ScopeType == ScopeOrg && b.ScopeID == orgID) {
			return nil
		}
		if b.ScopeType == ScopeProject && b.OrgID == orgID {
			out = append(out, b.ScopeID)
		}
	}
	return out
}
