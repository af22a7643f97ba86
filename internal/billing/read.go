package billing

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// Query is what a billing read asks for. One of ProjectID, OrgID or
// AppInstanceID names the scope (a service account defaults to its own
// project; a platform admin may read everything).
type Query struct {
	OrgID         string
	ProjectID     string
	AppInstanceID string
	UsageSource   string
	UsageUnit     string
	From, To      time.Time
	GroupBy       []string
}

// scope turns a query into a store filter the caller may read, checking
// perm at the narrowest scope named. Scopes the caller cannot see answer
// not found, like any other resource.
func (s *Service) scope(ctx context.Context, g *iam.Grants, qy Query, perm string) (UsageFilter, error) {
	f := UsageFilter{OrgID: qy.OrgID, ProjectID: qy.ProjectID, AppInstanceID: qy.AppInstanceID,
		UsageSource: qy.UsageSource, UsageUnit: qy.UsageUnit, From: qy.From, To: qy.To}
	var fe []errdefs.FieldError
	if f.UsageSource != "" && f.UsageSource != UsageSourceAllocation && f.UsageSource != UsageSourceAppRuntime {
		fe = append(fe, errdefs.FieldError{Field: "usage_source", Code: "invalid", Message: "must be allocation or app_runtime"})
	}
	if !f.From.IsZero() && !f.To.IsZero() && !f.From.Before(f.To) {
		fe = append(fe, errdefs.FieldError{Field: "to", Code: "invalid_range", Message: "must be after from"})
	}
	if fe != nil {
		return f, errdefs.Validation(fe)
	}
	instanceNotFound := errdefs.NotFound("app_instance_not_found", "app instance %q does not exist or you have no access to it", f.AppInstanceID)
	if f.ProjectID == "" && f.AppInstanceID != "" {
		if dir := s.src().Instances; dir != nil {
			inst, err := dir.BillingInstance(ctx, s.Store.Read(), f.AppInstanceID)
			if errors.Is(err, storage.ErrNotFound) {
				return f, instanceNotFound
			}
			if err != nil {
				return f, err
			}
			// The caller named an instance, not its project: an instance
			// it may not see is just not found (its project stays unsaid).
			if _, err := s.IAM.Project(ctx, g, inst.ProjectID, perm); errors.Is(err, storage.ErrNotFound) {
				return f, instanceNotFound
			}
			f.ProjectID = inst.ProjectID
		}
	}
	if f.ProjectID == "" && f.OrgID == "" {
		if p := principal.From(ctx); p.Type == principal.ServiceAccount {
			f.ProjectID = p.ProjectID
		}
	}
	switch {
	case f.ProjectID != "":
		p, err := s.IAM.Project(ctx, g, f.ProjectID, perm)
		if err != nil {
			return f, err
		}
		if f.OrgID != "" && f.OrgID != p.OrgID {
			f.ProjectIDs = []string{} // a project outside the org: nothing matches
		}
	case f.OrgID != "":
		o, err := s.IAM.Org(ctx, g, f.OrgID, "")
		if err != nil {
			return f, err
		}
		if !g.Can(perm, iam.Scope{OrgID: o.ID}) {
			// Project-level grants: read those projects of the org only.
			ids := []string{}
			for _, id := range g.ProjectIDsIn(o.ID) {
				if g.Can(perm, iam.Scope{OrgID: o.ID, ProjectID: id}) {
					ids = append(ids, id)
				}
			}
			f.ProjectIDs = ids
		}
	case g.IsPlatformAdmin():
	default:
		return f, errdefs.Invalid("scope_required",
			"name what to read: project_id, org_id or app_instance_id (only platform admins read across every tenant)")
	}
	return f, nil
}

// ListUsage returns usage records (billing.usage.read).
func (s *Service) ListUsage(ctx context.Context, g *iam.Grants, qy Query, p storage.Page) ([]UsageRecord, string, error) {
	f, err := s.scope(ctx, g, qy, iam.PermBillingUsageRead)
	if err != nil {
		return nil, "", err
	}
	return s.Store.Read().ListUsage(ctx, f, p)
}

// GroupUsage returns usage totals grouped by qy.GroupBy (billing.usage.read).
func (s *Service) GroupUsage(ctx context.Context, g *iam.Grants, qy Query) ([]UsageGroup, error) {
	if err := checkGroupBy(qy.GroupBy, UsageGroupColumns); err != nil {
		return nil, err
	}
	f, err := s.scope(ctx, g, qy, iam.PermBillingUsageRead)
	if err != nil {
		return nil, err
	}
	return s.Store.Read().GroupUsage(ctx, f, qy.GroupBy)
}

// ListLedger returns ledger entries (billing.usage.read).
func (s *Service) ListLedger(ctx context.Context, g *iam.Grants, qy Query, p storage.Page) ([]LedgerEntry, string, error) {
	f, err := s.scope(ctx, g, qy, iam.PermBillingUsageRead)
	if err != nil {
		return nil, "", err
	}
	return s.Store.Read().ListLedger(ctx, f, p)
}

// Costs returns the ledger's totals. Without GroupBy it is the combined
// cost a tenant sees (projects.read); grouped by source, unit, SKU or
// meter it is the operators' breakdown (billing.breakdown.read).
func (s *Service) Costs(ctx context.Context, g *iam.Grants, qy Query) ([]LedgerGroup, error) {
	perm := iam.PermProjectsRead
	if len(qy.GroupBy) > 0 {
		if err := checkGroupBy(qy.GroupBy, LedgerGroupColumns); err != nil {
			return nil, err
		}
		perm = iam.PermBillingBreakdownRead
		if !slices.Equal(qy.GroupBy, []string{"project_id"}) && !g.Can(perm, iam.Scope{}) {
			return nil, s.IAM.Deny(ctx, perm, iam.Scope{}, "ledger", "")
		}
		perm = iam.PermProjectsRead
	}
	if qy.UsageSource != "" || qy.UsageUnit != "" {
		if !g.Can(iam.PermBillingBreakdownRead, iam.Scope{}) {
			return nil, s.IAM.Deny(ctx, iam.PermBillingBreakdownRead, iam.Scope{}, "ledger", "")
		}
	}
	f, err := s.scope(ctx, g, qy, perm)
	if err != nil {
		return nil, err
	}
	return s.Store.Read().GroupLedger(ctx, f, qy.GroupBy)
}

func checkGroupBy(by, allowed []string) error {
	for _, c := range by {
		if !slices.Contains(allowed, c) {
			return errdefs.Invalid("invalid_group_by", "cannot group by %q; group by any of %v", c, allowed)
		}
	}
	return nil
}

// LedgerBalance is the sum of every ledger entry matching qy, per currency
// (billing.usage.read).
func (s *Service) LedgerBalance(ctx context.Context, g *iam.Grants, qy Query) ([]LedgerGroup, error) {
	f, err := s.scope(ctx, g, qy, iam.PermBillingUsageRead)
	if err != nil {
		return nil, err
	}
	return s.Store.Read().GroupLedger(ctx, f, nil)
}
