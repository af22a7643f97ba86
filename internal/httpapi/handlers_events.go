package httpapi

import (
	"net/http"
	"strings"
	"time"

	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/events"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/store"
)

type eventScope int

const (
	scopeProject eventScope = iota
	scopeOrg
	scopePlatform
)

// eventFilter authorizes the caller for the scope in the path and reads the
// filters: type (a prefix such as apps.artifact.), subject, since, until.
// A caller without events.read there is answered like a missing resource.
func (a *API) eventFilter(r *http.Request, sc eventScope) (store.EventFilter, error) {
	ctx := r.Context()
	g := grantsFrom(ctx)
	var f store.EventFilter
	switch sc {
	case scopeProject:
		p, err := a.IAM.Project(ctx, g, r.PathValue("project_id"), iam.PermEventsRead)
		if err != nil {
			return f, err
		}
		f.OrgID, f.ProjectID = p.OrgID, p.ID
	case scopeOrg:
		o, err := a.IAM.Org(ctx, g, r.PathValue("org_id"), iam.PermEventsRead)
		if err != nil {
			return f, err
		}
		f.OrgID = o.ID
	default:
		if err := a.IAM.RequirePlatform(ctx, g, iam.PermEventsRead, "event"); err != nil {
			return f, err
		}
	}
	qv := r.URL.Query()
	f.TypePrefix, f.Subject = strings.TrimSpace(qv.Get("type")), qv.Get("subject")
	if len(f.TypePrefix) > 200 || len(f.Subject) > 500 {
		return f, errdefs.Invalid("invalid_filter", "type must be at most 200 and subject at most 500 characters")
	}
	for name, dst := range map[string]*time.Time{"since": &f.Since, "until": &f.Until} {
		if v := qv.Get(name); v != "" {
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				return f, errdefs.Invalid("invalid_time", "%s must be an RFC 3339 time such as 2026-01-02T15:04:05Z", name)
			}
			*dst = t
		}
	}
	return f, nil
}

// listEvents pages through the retained events in stream order (oldest
// first); next_cursor continues after the last item.
func (a *API) listEvents(sc eventScope) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		f, err := a.eventFilter(r, sc)
		if err != nil {
			return err
		}
		pg, err := page(r)
		if err != nil {
			return err
		}
		var after int64
		if pg.Cursor != "" {
			if after, err = events.ParseCursor(pg.Cursor); err != nil {
				return err
			}
			if err := a.Events.CheckRetained(r.Context(), after); err != nil {
				return err
			}
		}
		limit := pg.Limit
		if limit == 0 {
			limit = store.DefaultPageLimit
		}
		items, next, err := a.Events.List(r.Context(), f, after, limit)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, list[events.Envelope]{Items: items, NextCursor: next})
		return nil
	}
}

// streamEvents serves live events as Server-Sent Events, resuming after
// Last-Event-ID (header, or the last_event_id query parameter for clients
// that cannot set headers).
func (a *API) streamEvents(sc eventScope) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		f, err := a.eventFilter(r, sc)
		if err != nil {
			return err
		}
		last := r.Header.Get("Last-Event-ID")
		if last == "" {
			last = r.URL.Query().Get("last_event_id")
		}
		after, err := a.Events.ResumePoint(r.Context(), strings.TrimSpace(last))
		if err != nil {
			return err
		}
		if err := a.Events.Stream(r.Context(), w, f, after); err != nil {
			a.Logger.DebugContext(r.Context(), "event stream ended", "error", err)
		}
		return nil
	}
}

func (a *API) asyncapi(w http.ResponseWriter, _ *http.Request) error {
	w.Header().Set("Content-Type", "application/yaml")
	_, err := w.Write(a.AsyncAPI)
	return err
}
