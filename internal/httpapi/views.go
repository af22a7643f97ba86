package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// JSON views of stored records: field names are the API contract's.

func rfc3339(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

type orgView struct {
	ID        string `json:"id"`
	Slug      string `json:"slug"`
	Name      string `json:"name"`
	CreatedAt string `json:"created_at"`
}

func viewOrg(o iam.Org) orgView {
	return orgView{ID: o.ID, Slug: o.Slug, Name: o.Name, CreatedAt: rfc3339(o.CreatedAt)}
}

type projectView struct {
	ID          string `json:"id"`
	OrgID       string `json:"org_id"`
	Slug        string `json:"slug"`
	Name        string `json:"name"`
	Description string `json:"description"`
	CreatedAt   string `json:"created_at"`
}

func viewProject(p iam.Project) projectView {
	return projectView{ID: p.ID, OrgID: p.OrgID, Slug: p.Slug, Name: p.Name, Description: p.Description, CreatedAt: rfc3339(p.CreatedAt)}
}

type bindingView struct {
	ID            string `json:"id"`
	PrincipalType string `json:"principal_type"`
	PrincipalID   string `json:"principal_id"`
	Role          string `json:"role"`
	ScopeType     string `json:"scope_type"`
	ScopeID       string `json:"scope_id"`
	CreatedAt     string `json:"created_at"`
}

func viewBinding(b iam.RoleBinding) bindingView {
	return bindingView{ID: b.ID, PrincipalType: b.PrincipalType, PrincipalID: b.PrincipalID, Role: b.Role,
		ScopeType: b.ScopeType, ScopeID: b.ScopeID, CreatedAt: rfc3339(b.CreatedAt)}
}

type auditView struct {
	ID            string          `json:"id"`
	OccurredAt    string          `json:"occurred_at"`
	ActorType     string          `json:"actor_type"`
	ActorID       string          `json:"actor_id"`
	OrgID         string          `json:"org_id"`
	ProjectID     string          `json:"project_id"`
	Action        string          `json:"action"`
	ResourceType  string          `json:"resource_type"`
	ResourceID    string          `json:"resource_id"`
	Before        json.RawMessage `json:"before"`
	After         json.RawMessage `json:"after"`
	Reason        string          `json:"reason"`
	CorrelationID string          `json:"correlation_id"`
	Outcome       string          `json:"outcome"`
}

func rawOrNull(b []byte) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	return b
}

func viewAudit(e storage.AuditEvent) auditView {
	return auditView{ID: e.ID, OccurredAt: rfc3339(e.OccurredAt), ActorType: e.ActorType, ActorID: e.ActorID, OrgID: e.OrgID,
		ProjectID: e.ProjectID, Action: e.Action, ResourceType: e.ResourceType, ResourceID: e.ResourceID,
		Before: rawOrNull(e.Before), After: rawOrNull(e.After), Reason: e.Reason, CorrelationID: e.CorrelationID, Outcome: e.Outcome}
}

// list is the shape of every paginated response.
type list[T any] struct {
	Items      []T    `json:"items"`
	NextCursor string `json:"next_cursor"`
}

func mapList[S, T any](items []S, next string, f func(S) T) list[T] {
	out := list[T]{Items: make([]T, 0, len(items)), NextCursor: next}
	for _, it := range items {
		out.Items = append(out.Items, f(it))
	}
	return out
}

// page reads the limit and cursor query parameters.
func page(r *http.Request) (storage.Page, error) {
	p := storage.Page{Cursor: r.URL.Query().Get("cursor")}
	if l := r.URL.Query().Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > storage.MaxPageLimit {
			return p, errdefs.Invalid("invalid_limit", "limit must be an integer from 1 to %d", storage.MaxPageLimit)
		}
		p.Limit = n
	}
	return p, nil
}
