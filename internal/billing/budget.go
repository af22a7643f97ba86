package billing

import (
	"context"
	"errors"
	"fmt"

	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// BudgetInput is the body of PUT /api/v1/projects/{project_id}/billing/budget.
// A null (or absent) limit means none.
type BudgetInput struct {
	GPUQuota             *int64 `json:"gpu_quota"`
	SpendLimitMicros     *int64 `json:"spend_limit_micros"`
	Currency             string `json:"currency,omitempty"`
	Period               string `json:"period,omitempty"`
	SoftThresholdPercent *int   `json:"soft_threshold_percent,omitempty"`
}

// GetBudget returns a project's budget and its current use
// (billing.usage.read). A project without one answers not found.
func (s *Service) GetBudget(ctx context.Context, g *iam.Grants, projectID string) (BudgetView, error) {
	p, err := s.IAM.Project(ctx, g, projectID, iam.PermBillingUsageRead)
	if err != nil {
		return BudgetView{}, err
	}
	b, err := s.Store.Read().GetBudget(ctx, p.ID)
	if errors.Is(err, storage.ErrNotFound) {
		return BudgetView{}, errdefs.NotFound("budget_not_found",
			"project %s has no budget; an org admin sets one with gpuaas billing budget set --project %s (PUT /api/v1/projects/%s/billing/budget)", p.ID, p.ID, p.ID)
	}
	if err != nil {
		return BudgetView{}, err
	}
	return s.viewBudget(ctx, s.Store.Read(), b)
}

func (s *Service) viewBudget(ctx context.Context, q Queries, b Budget) (BudgetView, error) {
	start, end := PeriodBounds(b.Period, s.Now())
	spent, err := q.ProjectSpend(ctx, b.ProjectID, start, end)
	if err != nil {
		return BudgetView{}, err
	}
	var gpus int64
	if c := s.src().GPUs; c != nil {
		if gpus, err = c.ProjectGPUs(ctx, q, b.ProjectID); err != nil {
			return BudgetView{}, err
		}
	}
	return BudgetView{ProjectID: b.ProjectID, OrgID: b.OrgID, GPUQuota: b.GPUQuota, SpendLimitMicros: b.SpendLimitMicros,
		Currency: b.Currency, Period: b.Period, SoftThresholdPercent: b.SoftThresholdPercent, GPUsInUse: gpus,
		SpendMicros: spent, PeriodStart: rfc(start), PeriodEnd: rfc(end), UpdatedBy: b.UpdatedBy, UpdatedAt: rfc(b.UpdatedAt)}, nil
}

// PutBudget sets a project's GPU quota and spend budget
// (billing.budget.write: org and platform admins), audited.
func (s *Service) PutBudget(ctx context.Context, g *iam.Grants, projectID string, in BudgetInput) (BudgetView, error) {
	p, err := s.IAM.Project(ctx, g, projectID, iam.PermBillingBudgetWrite)
	if err != nil {
		return BudgetView{}, err
	}
	b := Budget{ProjectID: p.ID, OrgID: p.OrgID, GPUQuota: in.GPUQuota, SpendLimitMicros: in.SpendLimitMicros,
		Currency: in.Currency, Period: in.Period, SoftThresholdPercent: 80, UpdatedBy: principal.From(ctx).Key()}
	if b.Currency == "" {
		b.Currency = s.Config.Currency
	}
	if b.Period == "" {
		b.Period = "month"
	}
	if in.SoftThresholdPercent != nil {
		b.SoftThresholdPercent = *in.SoftThresholdPercent
	}
	var fe []errdefs.FieldError
	if b.GPUQuota != nil && *b.GPUQuota < 0 {
		fe = append(fe, errdefs.FieldError{Field: "/gpu_quota", Code: "out_of_range", Message: "must be 0 or more (null for no quota)"})
	}
	if b.SpendLimitMicros != nil && *b.SpendLimitMicros < 0 {
		fe = append(fe, errdefs.FieldError{Field: "/spend_limit_micros", Code: "out_of_range", Message: "must be 0 or more (null for no limit)"})
	}
	if b.Currency != s.Config.Currency {
		fe = append(fe, errdefs.FieldError{Field: "/currency", Code: "unsupported", Message: "must be " + s.Config.Currency + ", the currency of this platform's prices"})
	}
	if b.Period != "day" && b.Period != "month" {
		fe = append(fe, errdefs.FieldError{Field: "/period", Code: "invalid", Message: "must be day or month"})
	}
	if b.SoftThresholdPercent < 1 || b.SoftThresholdPercent > 100 {
		fe = append(fe, errdefs.FieldError{Field: "/soft_threshold_percent", Code: "out_of_range", Message: "must be between 1 and 100"})
	}
	if fe != nil {
		return BudgetView{}, errdefs.Validation(fe)
	}
	now := s.Now().UTC()
	var out BudgetView
	err = s.Store.Mutate(ctx, func(tx Tx) error {
		cur, err := tx.GetBudget(ctx, p.ID)
		var before any
		switch {
		case errors.Is(err, storage.ErrNotFound):
			b.CreatedAt = now
		case err != nil:
			return err
		default:
			b.CreatedAt, before = cur.CreatedAt, budgetState(cur)
		}
		b.UpdatedAt = now
		if err := tx.PutBudget(ctx, b); err != nil {
			return err
		}
		if out, err = s.viewBudget(ctx, tx, b); err != nil {
			return err
		}
		if err := tx.Emit(storage.Event{Type: EventBudgetUpdated, Subject: "projects/" + p.ID + "/billing/budget",
			OrgID: p.OrgID, ProjectID: p.ID}, budgetState(b)); err != nil {
			return err
		}
		return tx.Audit(storage.AuditEvent{Action: "billing.budget.put", ResourceType: "billing_budget", ResourceID: p.ID,
			OrgID: p.OrgID, ProjectID: p.ID}, before, budgetState(b))
	})
	return out, err
}

func budgetState(b Budget) map[string]any {
	return map[string]any{"project_id": b.ProjectID, "gpu_quota": b.GPUQuota, "spend_limit_micros": b.SpendLimitMicros,
		"currency": b.Currency, "period": b.Period, "soft_threshold_percent": b.SoftThresholdPercent}
}

// LaunchCheck describes a launch about to be placed.
type LaunchCheck struct {
	ProjectID string
	// GPUs the launch adds to the project's concurrent GPUs: an
	// allocation's GPU count; 0 for an app instance on an existing
	// allocation (it holds no GPUs of its own).
	GPUs int64
	// What is launched, for the message: "allocation", "app instance".
	What string
}

// CheckLaunch refuses a launch that would take the project over its GPU
// quota, or that starts while the project's spend in the current period has
// reached its budget. Callers run it inside the transaction that places the
// launch, before anything is placed; q is that transaction. A project with
// no budget is not limited.
func (s *Service) CheckLaunch(ctx context.Context, q Queries, c LaunchCheck) error {
	// Launches of one project are checked one at a time, so two cannot
	// both fit under the same remaining quota.
	b, err := q.LockBudget(ctx, c.ProjectID)
	if errors.Is(err, storage.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	what := c.What
	if what == "" {
		what = "launch"
	}
	if b.GPUQuota != nil && c.GPUs > 0 {
		var inUse int64
		if counter := s.src().GPUs; counter != nil {
			if inUse, err = counter.ProjectGPUs(ctx, q, c.ProjectID); err != nil {
				return err
			}
		}
		if inUse+c.GPUs > *b.GPUQuota {
			return errdefs.Conflict("quota_exceeded",
				"this %s needs %d GPUs, but project %s already holds %d of its GPU quota of %d; release capacity or ask an org admin to raise the quota",
				what, c.GPUs, c.ProjectID, inUse, *b.GPUQuota).WithDetails(map[string]any{
				"budget": "gpu_quota", "in_use": inUse, "requested": c.GPUs, "limit": *b.GPUQuota})
		}
	}
	if b.SpendLimitMicros != nil {
		start, end := PeriodBounds(b.Period, s.Now())
		spent, err := q.ProjectSpend(ctx, c.ProjectID, start, end)
		if err != nil {
			return err
		}
		if spent >= *b.SpendLimitMicros {
			return errdefs.Conflict("budget_exceeded",
				"project %s has spent %s of its %s %s budget this %s (since %s); new launches are refused until the period ends or an org admin raises the budget",
				c.ProjectID, money(spent), money(*b.SpendLimitMicros), b.Currency, b.Period, rfc(start)).WithDetails(map[string]any{
				"budget": "spend_limit", "spend_micros": spent, "limit_micros": *b.SpendLimitMicros, "currency": b.Currency,
				"period": b.Period, "period_start": rfc(start)})
		}
	}
	return nil
}

// money renders micro-units as a decimal amount, e.g. 1234567 → "1.234567".
func money(micros int64) string {
	sign := ""
	if micros < 0 {
		sign, micros = "-", -micros
	}
	return fmt.Sprintf("%s%d.%06d", sign, micros/1_000_000, micros%1_000_000)
}
