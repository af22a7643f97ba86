package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/gpuaas/gpuaas/internal/correlation"
	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/events"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/storage"
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
func (a *API) eventFilter(r *http.Request, sc eventScope) (events.EventFilter, error) {
	ctx := r.Context()
	g := grantsFrom(ctx)
	var f events.EventFilter
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
			if err := a.Events.CheckRetained(r.Context(), f, after); err != nil {
				return err
			}
		}
		limit := pg.Limit
		if limit == 0 {
			limit = storage.DefaultPageLimit
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
		after, err := a.Events.ResumePoint(r.Context(), f, strings.TrimSpace(last))
		if err != nil {
			return err
		}
		release, err := a.streams.take(r)
		if err != nil {
			return err
		}
		defer release()
		var revoked *events.Revoked
		if err := a.Events.Stream(r.Context(), w, f, after, a.streamAccess(r, sc)); errors.Is(err, events.ErrSlowConsumer) || errors.Is(err, events.ErrStreamExpired) || errors.As(err, &revoked) {
			a.Logger.InfoContext(r.Context(), "event stream ended", "error", err)
		} else if err != nil {
			a.Logger.DebugContext(r.Context(), "event stream ended", "error", err)
		}
		return nil
	}
}

// streamEventsWS serves the same stream over WebSocket (for browsers):
// authorized like every route, before the upgrade (the token comes as
// Authorization or as the subprotocol bearer.<token>); the resume point is
// the last_event_id query parameter. A resume point past retention is
// accepted and then refused on the socket (an error message, close 4410),
// because a browser cannot read the status of a failed handshake.
func (a *API) streamEventsWS(sc eventScope) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		f, err := a.eventFilter(r, sc)
		if err != nil {
			return err
		}
		if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
			return errdefs.Invalid("websocket_required", "this route is a WebSocket (GET with Upgrade: websocket and subprotocol %s); use …/events/stream for Server-Sent Events", events.WebSocketProtocol)
		}
		if !offersProtocol(r, events.WebSocketProtocol) {
			return errdefs.Invalid("websocket_protocol_required", "offer the subprotocol %s in Sec-WebSocket-Protocol", events.WebSocketProtocol)
		}
		after, resumeErr := a.Events.ResumePoint(r.Context(), f, strings.TrimSpace(r.URL.Query().Get("last_event_id")))
		if e, ok := errdefs.As(resumeErr); resumeErr != nil && (!ok || e.Code != "cursor_expired") {
			return resumeErr
		}
		release, err := a.streams.take(r)
		if err != nil {
			return err
		}
		defer release()
		// The server's request deadlines would cut the hijacked connection;
		// the stream bounds its own writes (WriteTimeout).
		rc := http.NewResponseController(w)
		_ = rc.SetReadDeadline(time.Time{})
		_ = rc.SetWriteDeadline(time.Time{})
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{
			Subprotocols:   []string{events.WebSocketProtocol},
			OriginPatterns: a.WebSocketOrigins,
		})
		if err != nil {
			// Accept has answered (403 for a foreign Origin, 400 for a bad handshake).
			a.Logger.InfoContext(r.Context(), "event websocket refused", "error", err, "origin", r.Header.Get("Origin"))
			return nil
		}
		if resumeErr != nil {
			e, _ := errdefs.As(resumeErr)
			events.RefuseWebSocket(r.Context(), c, envelopeBody{Code: e.Code, Message: e.Message,
				CorrelationID: correlation.ID(r.Context()), Details: e.Details}, resumeErr)
			return nil
		}
		if err := a.Events.StreamWebSocket(r.Context(), c, f, after, a.streamAccess(r, sc)); err != nil {
			a.Logger.InfoContext(r.Context(), "event websocket ended", "error", err)
		}
		return nil
	}
}

// streamAccess is what an open stream keeps checking (events.Access): it
// ends at the token's expiry, and Recheck runs the open-time authentication
// and eventFilter's permission check again — so a revoked or expired token,
// a disabled or deleted account and a removed role binding all end it.
func (a *API) streamAccess(r *http.Request, sc eventScope) events.Access {
	s, _ := r.Context().Value(sessionKey).(session)
	return events.Access{Expires: s.expires, Recheck: func(ctx context.Context) error {
		p, err := a.Tokens.Authenticate(ctx, s.token)
		if err != nil {
			return revokedBy(err)
		}
		g, err := iam.LoadGrants(ctx, a.Store.Read(), p)
		if err != nil {
			return err
		}
		ctx = context.WithValue(principal.With(ctx, p), grantsKey, g)
		if _, err := a.eventFilter(r.WithContext(ctx), sc); err != nil {
			if k := errdefs.KindOf(err); k == errdefs.KindNotFound || k == errdefs.KindPermissionDenied {
				return &events.Revoked{Reason: events.ReasonAccessRevoked,
					Message: "you no longer have events.read on this stream's scope (a role binding was removed)"}
			}
			return err
		}
		return nil
	}}
}

// revokedBy names why a token that authenticated when the stream opened no
// longer does; an error that is not a refusal (the database) is passed on
// as transient.
func revokedBy(err error) error {
	if errdefs.KindOf(err) != errdefs.KindUnauthenticated {
		return err
	}
	if errors.Is(err, iam.ErrTokenExpired) {
		return events.TokenExpired()
	}
	for _, c := range []struct {
		why     error
		reason  string
		message string
	}{
		{iam.ErrAccountDisabled, events.ReasonAccountDisabled, "the account was disabled"},
		{iam.ErrAccountDeleted, events.ReasonAccountDeleted, "the account no longer exists"},
	} {
		if errors.Is(err, c.why) {
			return &events.Revoked{Reason: c.reason, Message: c.message}
		}
	}
	return &events.Revoked{Reason: events.ReasonTokenRevoked, Message: "the access token was revoked; sign in again"}
}

func offersProtocol(r *http.Request, want string) bool {
	for _, h := range r.Header.Values("Sec-WebSocket-Protocol") {
		for _, p := range strings.Split(h, ",") {
			if strings.EqualFold(strings.TrimSpace(p), want) {
				return true
			}
		}
	}
	return false
}

type republishRequest struct {
	Since  string `json:"since"`
	Reason string `json:"reason"`
}

// republishEvents (platform admins) queues retained events from `since` to
// be published to JetStream again, for a bus that lost messages: the relay
// sends them in order with Nats-Msg-Id = event id. Audited.
func (a *API) republishEvents(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	if err := a.IAM.RequirePlatform(ctx, grantsFrom(ctx), iam.PermPlatformAdminOnly, "event"); err != nil {
		return err
	}
	var req republishRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	if len(req.Reason) > 1024 {
		return errdefs.Invalid("invalid_reason", "reason must be at most 1024 characters")
	}
	from, err := a.Events.RepublishFrom(ctx, req.Since)
	if err != nil {
		return err
	}
	res := events.RepublishResult{FromSequence: from}
	err = a.Store.Mutate(ctx, func(tx Tx) error {
		if from > 0 {
			if res.Events, err = tx.RequeueEvents(ctx, from); err != nil {
				return err
			}
		}
		return tx.Audit(storage.AuditEvent{Action: "events.republish", ResourceType: "event", ResourceID: strconv.FormatInt(from, 10),
			Reason: req.Reason}, nil, map[string]any{"since": req.Since, "from_sequence": from, "events": res.Events})
	})
	if err != nil {
		return err
	}
	if a.RelayKick != nil {
		a.RelayKick()
	}
	writeJSON(w, http.StatusAccepted, res)
	return nil
}

func (a *API) asyncapi(w http.ResponseWriter, _ *http.Request) error {
	w.Header().Set("Content-Type", "application/yaml")
	_, err := w.Write(a.AsyncAPI)
	return err
}

// listParkedEvents shows operators the events the bus refused for good
// (platform admins), with counts by reason.
func (a *API) listParkedEvents(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	if err := a.IAM.RequirePlatform(ctx, grantsFrom(ctx), iam.PermEventsRead, "event"); err != nil {
		return err
	}
	pg, err := page(r)
	if err != nil {
		return err
	}
	items, next, err := events.ListParked(ctx, a.Store.Read(), pg)
	if err != nil {
		return err
	}
	counts, err := a.Store.Read().ParkedEventCounts(ctx)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, struct {
		list[events.Parked]
		Counts map[string]int64 `json:"counts"`
	}{list[events.Parked]{Items: items, NextCursor: next}, counts})
	return nil
}
