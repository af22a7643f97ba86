package servertest

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"

	"github.com/gpuaas/gpuaas/internal/store"
)

// Audit before/after payloads are a public contract: one snake_case shape
// per resource, and no zero times standing in for "unset". Checking every
// row a test left makes any new resource that breaks the rule fail.
var auditKeyRE = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

const zeroTime = "0001-01-01T00:00:00Z"

func (s *Server) checkAuditShapes() {
	ctx := context.Background()
	page := store.Page{Limit: store.MaxPageLimit}
	for {
		evs, next, err := s.DB.Queries().ListAudit(ctx, store.AuditFilter{}, page)
		if err != nil {
			s.T.Errorf("audit shape check: %v", err)
			return
		}
		for _, e := range evs {
			for name, raw := range map[string][]byte{"before": e.Before, "after": e.After} {
				if len(raw) == 0 {
					continue
				}
				var v any
				if err := json.Unmarshal(raw, &v); err != nil {
					s.T.Errorf("audit %s %s: %s is not JSON: %v", e.Action, e.ResourceID, name, err)
					continue
				}
				if problem := auditShapeProblem(v, name); problem != "" {
					s.T.Errorf("audit %s (%s): %s", e.Action, e.ResourceType, problem)
				}
			}
		}
		if next == "" {
			return
		}
		page.Cursor = next
	}
}

// auditShapeProblem returns the first rule v breaks, or "".
func auditShapeProblem(v any, path string) string {
	switch x := v.(type) {
	case map[string]any:
		for k, c := range x {
			if !auditKeyRE.MatchString(k) {
				return fmt.Sprintf("%s has key %q, want snake_case", path, k)
			}
			if p := auditShapeProblem(c, path+"."+k); p != "" {
				return p
			}
		}
	case []any:
		for i, c := range x {
			if p := auditShapeProblem(c, fmt.Sprintf("%s[%d]", path, i)); p != "" {
				return p
			}
		}
	case string:
		if len(x) >= len(zeroTime)-1 && x[:10] == "0001-01-01" {
			return fmt.Sprintf("%s is the zero time; omit unset times", path)
		}
	}
	return ""
}
