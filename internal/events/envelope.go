// Package events carries the platform's events from the transactional
// outbox to their consumers: the relay that orders and publishes outbox rows
// to NATS JetStream under a lease, the NATS bus (embedded or external), the
// in-process hub that wakes streams, and the reads behind the event API
// (lists and a resumable Server-Sent Events stream served from the outbox).
package events

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/gpuaas/gpuaas/internal/storage"
)

// SpecVersion is the CloudEvents version of every envelope.
const SpecVersion = "1.0"

// DataVersion is the payload version of every event type today; a breaking
// change to a payload ships as a new version in api/asyncapi.yaml and
// dataschema.
const DataVersion = 1

// Envelope is one event as consumers see it: a CloudEvents 1.0 structured
// JSON envelope with the platform's extension attributes.
type Envelope struct {
	SpecVersion     string          `json:"specversion"`
	ID              string          `json:"id"`
	Source          string          `json:"source"`
	Type            string          `json:"type"`
	Subject         string          `json:"subject,omitempty"`
	Time            string          `json:"time"`
	DataContentType string          `json:"datacontenttype"`
	DataSchema      string          `json:"dataschema"`
	Data            json.RawMessage `json:"data"`
	CorrelationID   string          `json:"correlationid,omitempty"`
	OrgID           string          `json:"orgid,omitempty"`
	ProjectID       string          `json:"projectid,omitempty"`
	Actor           string          `json:"actor,omitempty"`
	// Sequence is the event's position in the one platform-wide order; a
	// stream resumes after it (it is also the SSE id).
	Sequence int64 `json:"sequence"`
}

// DataSchema names the payload contract of an event type: the message of
// that name in /api/asyncapi.yaml, at a payload version.
func DataSchema(eventType string) string {
	return "urn:gpuaas:events:" + eventType + ":v" + strconv.Itoa(DataVersion)
}

// FromStore builds the envelope of a sequenced outbox row.
func FromStore(e storage.Event) Envelope {
	data := json.RawMessage(e.Data)
	if len(data) == 0 {
		data = json.RawMessage("{}")
	}
	return Envelope{
		SpecVersion: SpecVersion, ID: e.ID, Source: e.Source, Type: e.Type, Subject: e.Subject,
		Time: e.Time.UTC().Format(time.RFC3339Nano), DataContentType: "application/json", DataSchema: DataSchema(e.Type),
		Data: data, CorrelationID: e.CorrelationID, OrgID: e.OrgID, ProjectID: e.ProjectID, Actor: e.Actor,
		Sequence: e.Position,
	}
}

// SubjectPrefix is the root of every event subject on the bus.
const SubjectPrefix = "gpuaas.events"

// BusSubject is the NATS subject of an event:
// gpuaas.events.<org>.<project>.<type>, with "_" for a platform-wide event's
// missing org or project, so consumers can subscribe per org, per project
// or per type with NATS wildcards.
func BusSubject(orgID, projectID, eventType string) string {
	return SubjectPrefix + "." + token(orgID) + "." + token(projectID) + "." + eventType
}

func token(s string) string {
	if s == "" {
		return "_"
	}
	// Ids are UUIDs; anything else is made safe for a single subject token.
	return strings.Map(func(r rune) rune {
		switch r {
		case '.', '*', '>', ' ', '\t', '\r', '\n':
			return '_'
		}
		return r
	}, s)
}
