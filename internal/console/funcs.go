package console

import (
	"html/template"
	"strings"

	"github.com/gpuaas/gpuaas/internal/instances"
)

// liveEventTypes are the events a live page listens for.
var liveEventTypes = strings.Join([]string{instances.EventRequested, instances.EventDeploying, instances.EventRunning,
	instances.EventUpgradeRequested, instances.EventUpgraded, instances.EventRollbackRequested, instances.EventRolledBack,
	instances.EventDecommissionRequested, instances.EventDecommissioned, instances.EventFailed}, ",")

var funcs = template.FuncMap{
	"list":       func(v ...string) []string { return v },
	"eventTypes": func() string { return liveEventTypes },
	// short abbreviates ids and digests for tables (the full value is
	// on the detail page).
	"short": func(s string) string {
		if _, rest, ok := strings.Cut(s, ":"); ok && len(rest) > 12 {
			return s[:len(s)-len(rest)] + rest[:12]
		}
		if len(s) > 13 {
			return s[:13] + "…"
		}
		return s
	},
}
