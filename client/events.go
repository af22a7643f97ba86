package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Event is one platform event: a CloudEvents 1.0 envelope (api/asyncapi.yaml
// documents every type's data).
type Event struct {
	SpecVersion     string          `json:"specversion"`
	ID              string          `json:"id"`
	Source          string          `json:"source"`
	Type            string          `json:"type"`
	Subject         string          `json:"subject,omitempty"`
	Time            time.Time       `json:"time"`
	DataContentType string          `json:"datacontenttype"`
	DataSchema      string          `json:"dataschema"`
	Data            json.RawMessage `json:"data"`
	CorrelationID   string          `json:"correlationid,omitempty"`
	OrgID           string          `json:"orgid,omitempty"`
	ProjectID       string          `json:"projectid,omitempty"`
	Actor           string          `json:"actor,omitempty"`
	Sequence        int64           `json:"sequence"`
}

// EventList is one page of events, oldest first.
type EventList struct {
	Items      []Event `json:"items"`
	NextCursor string  `json:"next_cursor"`
}

// EventFilter narrows lists and streams; empty fields match everything.
type EventFilter struct {
	Type    string // a type or a prefix such as "apps.artifact."
	Subject string
	Since   time.Time
	Until   time.Time
	Limit   int
	Cursor  string
}

func (f EventFilter) query() url.Values {
	q := url.Values{}
	set := func(k, v string) {
		if v != "" {
			q.Set(k, v)
		}
	}
	set("type", f.Type)
	set("subject", f.Subject)
	set("cursor", f.Cursor)
	if !f.Since.IsZero() {
		q.Set("since", f.Since.UTC().Format(time.RFC3339))
	}
	if !f.Until.IsZero() {
		q.Set("until", f.Until.UTC().Format(time.RFC3339))
	}
	if f.Limit > 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	return q
}

// ProjectEventsPath, OrgEventsPath and PlatformEventsPath are the event
// routes of each scope (append "/stream" for the live form).
func ProjectEventsPath(projectID string) string {
	return "/api/v1/projects/" + url.PathEscape(projectID) + "/events"
}
func OrgEventsPath(orgID string) string { return "/api/v1/orgs/" + url.PathEscape(orgID) + "/events" }

const PlatformEventsPath = "/api/v1/admin/events"

// Republished is what POST /api/v1/admin/events/republish queued.
type Republished struct {
	FromSequence int64 `json:"from_sequence"`
	Events       int64 `json:"events"`
}

type republishRequest struct {
	Since  string `json:"since"`
	Reason string `json:"reason"`
}

// RepublishEvents (platform admins) has the relay publish the retained
// events from since (a sequence, an event id or an RFC 3339 time,
// inclusive) to JetStream again, with Nats-Msg-Id = event id.
//
// Operation: republishEvents
func (c *Client) RepublishEvents(ctx context.Context, since, reason string) (Republished, error) {
	var out Republished
	err := c.Do(ctx, http.MethodPost, PlatformEventsPath+"/republish", nil, republishRequest{Since: since, Reason: reason}, &out)
	return out, err
}

// ParkedEvent is an event the bus refused for good.
type ParkedEvent struct {
	Event    Event  `json:"event"`
	Reason   string `json:"reason"` // payload_too_large | invalid_subject
	ParkedAt string `json:"parked_at"`
}

// ParkedEventList is one page of parked events, oldest first, with the
// count of all parked events by reason.
type ParkedEventList struct {
	Items      []ParkedEvent    `json:"items"`
	NextCursor string           `json:"next_cursor"`
	Counts     map[string]int64 `json:"counts"`
}

// ListParkedEvents lists the events the bus refused for good (platform
// admins).
//
// Operation: listParkedEvents
func (c *Client) ListParkedEvents(ctx context.Context, o CatalogListOptions) (ParkedEventList, error) {
	var out ParkedEventList
	return out, c.Do(ctx, http.MethodGet, PlatformEventsPath+"/parked", o.query(), nil, &out)
}

// ListEvents reads one page of events under path (a *EventsPath).
//
// Operation: listProjectEvents listOrgEvents listPlatformEvents
func (c *Client) ListEvents(ctx context.Context, path string, f EventFilter) (EventList, error) {
	var out EventList
	err := c.Do(ctx, http.MethodGet, path, f.query(), nil, &out)
	return out, err
}

// StreamEvents follows a project's events, calling fn for each in order,
// starting after lastEventID (an event's sequence or id; "" starts at the
// oldest retained event). It reconnects after a dropped connection or a server
// restart, resuming after the last event it delivered, so fn sees every
// event exactly once and in order. It returns when ctx ends (nil), when fn
// returns an error (that error), or on an API error such as 410
// cursor_expired (*APIError).
//
// Operation: streamProjectEvents
func (c *Client) StreamEvents(ctx context.Context, projectID, lastEventID string, fn func(Event) error) error {
	return c.FollowEvents(ctx, ProjectEventsPath(projectID), EventFilter{}, lastEventID, fn)
}

// ResumeNow as a lastEventID starts the stream after the newest event:
// only events from now on. The stream's opening names that event, so a
// reconnect resumes after it and misses nothing.
const ResumeNow = "now"

// FollowEvents is StreamEvents for any scope's path and filter. A connect
// refused with 429 or 503 is tried again after the answer's Retry-After
// (at most c.Retry's MaxWait, 30 s without a policy), or after the
// follower's own backoff (100 ms doubling to 5 s) when that is longer.
//
// Operation: streamProjectEvents streamOrgEvents streamPlatformEvents
func (c *Client) FollowEvents(ctx context.Context, path string, f EventFilter, lastEventID string, fn func(Event) error) error {
	hc := *c.HTTP
	hc.Timeout = 0 // a stream lives as long as ctx
	backoff := 100 * time.Millisecond
	for {
		delivered := false
		err := c.streamOnce(ctx, &hc, path, f, &lastEventID, func(e Event) error {
			delivered = true
			return fn(e)
		})
		var api *APIError
		var cb callbackError
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.As(err, &cb):
			return cb.err
		case errors.As(err, &api) && api.Status < 500 && api.Status != http.StatusTooManyRequests:
			return err
		}
		if delivered {
			backoff = 100 * time.Millisecond
		}
		wait := backoff
		if api != nil {
			// A refused connect (429: too many streams; 503) waits at least
			// as long as the server asked, capped as a RetryPolicy caps it,
			// so a follower does not knock again every few seconds.
			wait = max(wait, min(api.RetryAfter, c.Retry.maxWait()))
		}
		if waitFor(ctx, wait, c.sleep) != nil {
			return nil
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

type callbackError struct{ err error }

func (e callbackError) Error() string { return e.err.Error() }

func (c *Client) streamOnce(ctx context.Context, hc *http.Client, path string, f EventFilter, last *string, fn func(Event) error) error {
	q := f.query()
	q.Del("cursor")
	q.Del("limit")
	u := c.BaseURL + path + "/stream"
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	c.authorize(req)
	req.Header.Set("Accept", "text/event-stream")
	if *last != "" {
		req.Header.Set("Last-Event-ID", *last)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return decodeResponse(req, resp, nil, 1<<20)
	}
	return ReadSSE(resp.Body, func(m SSEMessage) error {
		if m.Data == "" {
			// The stream's opening names where it starts ("now" resolved
			// to a sequence): a reconnect resumes there, not at a later now.
			if m.ID != "" {
				*last = m.ID
			}
			return nil
		}
		if m.Event == "error" {
			return streamError(m.Data)
		}
		var e Event
		if err := json.Unmarshal([]byte(m.Data), &e); err != nil {
			return fmt.Errorf("event stream: bad event %q: %w", m.ID, err)
		}
		if err := fn(e); err != nil {
			return callbackError{err}
		}
		if m.ID != "" {
			*last = m.ID
		}
		return nil
	})
}

// streamError turns the last message of a stream whose reader lost access
// (event: error, data {"error": {…}}) into an *APIError: 403 for
// access_revoked, 401 otherwise (token expired or revoked, account disabled
// or deleted), so FollowEvents returns it rather than reconnecting.
func streamError(data string) error {
	var env struct {
		Error *APIError `json:"error"`
	}
	if err := json.Unmarshal([]byte(data), &env); err != nil || env.Error == nil {
		return fmt.Errorf("event stream: bad error message %q", data)
	}
	env.Error.Status = http.StatusUnauthorized
	if env.Error.Code == "access_revoked" {
		env.Error.Status = http.StatusForbidden
	}
	return env.Error
}

// SSEMessage is one Server-Sent Events message.
type SSEMessage struct {
	ID, Event, Data string
}

// ReadSSE parses a text/event-stream body, calling fn for every message
// with data or an id (an id-only message has empty Data; comments and
// retry hints are skipped). It returns fn's error, the read
// error, or io.ErrUnexpectedEOF when the stream ends (streams do not end
// on their own).
func ReadSSE(r io.Reader, fn func(SSEMessage) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var m SSEMessage
	var data strings.Builder
	hasData := false
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			// A message with data, or only an id (it moves the resume
			// point, as it sets an EventSource's lastEventId).
			if hasData || m.ID != "" {
				m.Data = data.String()
				if err := fn(m); err != nil {
					return err
				}
			}
			m, hasData = SSEMessage{}, false
			data.Reset()
			continue
		}
		if strings.HasPrefix(line, ":") {
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "id":
			m.ID = value
		case "event":
			m.Event = value
		case "data":
			if hasData {
				data.WriteByte('\n')
			}
			data.WriteString(value)
			hasData = true
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return io.ErrUnexpectedEOF
}
