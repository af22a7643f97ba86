// Package cloudevents reads the CloudEvents 1.0 JSON envelope (structured
// mode) that workloads post to the platform: usage reports and runtime
// events share it. It checks the envelope only; each domain decodes its own
// data. Every problem is a field error addressed by a JSON pointer to the
// event and field, so a batch is refused whole with every reason at once.
package cloudevents

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/gpuaas/gpuaas/internal/errdefs"
)

// Media types of the CloudEvents JSON format (structured mode).
const (
	MediaTypeEvent = "application/cloudevents+json"
	MediaTypeBatch = "application/cloudevents-batch+json"
)

// Limits on the envelope's identifying fields, so a dedupe key stays small.
const (
	MaxIDLen     = 256
	MaxSourceLen = 1024
	MaxTypeLen   = 256
)

// maxProblems bounds the field errors one refusal lists: enough to act on;
// the rest likely repeat.
const maxProblems = 20

// Envelope is one event's context attributes; Data is left for the domain
// to decode. (Source, ID) identifies the event, as the spec defines
// uniqueness.
type Envelope struct {
	ID            string
	Source        string
	Type          string
	Subject       string
	Time          time.Time // the event's time, or the receive time when it has none
	ProjectID     string    // the projectid extension, when set
	CorrelationID string    // the correlationid extension, when set
	Data          json.RawMessage
}

type wireEvent struct {
	SpecVersion     string          `json:"specversion"`
	ID              string          `json:"id"`
	Source          string          `json:"source"`
	Type            string          `json:"type"`
	Subject         string          `json:"subject"`
	Time            string          `json:"time"`
	DataContentType string          `json:"datacontenttype"`
	ProjectID       string          `json:"projectid"`
	CorrelationID   string          `json:"correlationid"`
	Data            json.RawMessage `json:"data"`
}

// Key is the durable dedupe key of an event a workload posted: the
// CloudEvents (source, id) pair within a project (so one tenant's ids can
// never swallow another's events), or within an instance (Rekey), under a
// namespace per kind of report.
// The source is hashed to a fixed width; the id is kept as sent, so ids
// that grow in order (counters, UUIDv7) land side by side in a unique index
// instead of at random pages.
func Key(namespace, projectID, source, id string) string {
	sum := sha256.Sum256([]byte(source))
	return namespace + ":" + projectID + ":" + hex.EncodeToString(sum[:16]) + ":" + id
}

// Keyed is a row an instance's event was to be stored as: its id, the key
// it was tried under (Key, within the project) and the event's source and
// id.
type Keyed struct{ RowID, Key, Source, EventID string }

// Rekey finds the rows that were not stored (stored has no RowID) because
// a row of another instance holds their key, and returns the key each is
// to be stored under instead: Key(namespace, instanceID, …), within the
// instance. A row whose key its own instance holds is a duplicate and gets
// none. An event is a duplicate only of its own instance's event, so an
// instance that posts another's (source, id), by mistake or on purpose,
// cannot make the other's go unrecorded; the key within the project comes
// first so that events stored before instances had keys of their own
// still dedupe. owners returns the instance of the row under each key.
func Rekey(ctx context.Context, namespace, instanceID string, rows []Keyed, stored map[string]bool,
	owners func(context.Context, []string) (map[string]string, error)) (map[string]string, error) {
	var keys []string
	for _, r := range rows {
		if !stored[r.RowID] {
			keys = append(keys, r.Key)
		}
	}
	if len(keys) == 0 {
		return nil, nil
	}
	held, err := owners(ctx, keys)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, r := range rows {
		if owner, ok := held[r.Key]; !stored[r.RowID] && ok && owner != instanceID {
			out[r.RowID] = Key(namespace, instanceID, r.Source, r.EventID)
		}
	}
	return out, nil
}

// CheckOwn refuses an event posted for an app instance that names another
// one: its projectid and subject, when set, must be the instance's project
// and id. kind prefixes the error codes (usage, runtime_event).
func CheckOwn(kind, eventID, projectID, subject, instanceID, instanceProject string) error {
	switch {
	case projectID != "" && projectID != instanceProject:
		return errdefs.Unprocessable(kind+"_project_mismatch",
			"event %q names project %s, but app instance %s belongs to project %s; an instance reports only about itself",
			eventID, projectID, instanceID, instanceProject)
	case subject != "" && subject != instanceID:
		return errdefs.Unprocessable(kind+"_instance_mismatch",
			"event %q has subject %q, but it was posted for app instance %s; an instance reports only about itself",
			eventID, subject, instanceID)
	}
	return nil
}

// Printable reports whether s is valid UTF-8 with no control characters
// (NUL included): the same text on both dialects, and one a person can read.
func Printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// Split reads a structured-mode body into its events' raw JSON: one event
// (batch false) or a JSON array of them (batch true).
func Split(body []byte, batch bool) ([]json.RawMessage, error) {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return nil, errdefs.Invalid("empty_body", "the request body is empty; send a CloudEvents 1.0 JSON event (or an array of them with %s)", MediaTypeBatch)
	}
	if !batch {
		if body[0] != '{' {
			return nil, errdefs.Invalid("malformed_event", "a %s body must be one JSON object; send arrays as %s", MediaTypeEvent, MediaTypeBatch)
		}
		return []json.RawMessage{body}, nil
	}
	if body[0] != '[' {
		return nil, errdefs.Invalid("malformed_batch", "a %s body must be a JSON array of events", MediaTypeBatch)
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(body, &raws); err != nil {
		return nil, errdefs.Invalid("malformed_json", "the batch is not valid JSON: %v", err)
	}
	if len(raws) == 0 {
		return nil, errdefs.Invalid("empty_batch", "the batch holds no events")
	}
	return raws, nil
}

// ParseBatch reads a structured-mode body (one event, or an array when
// batch) and turns each event's raw JSON into a T with parse, which reports
// every problem through bad. At most max events are taken (0: no bound;
// what names them in the refusal). Nothing is returned unless every event
// is valid: a batch is accepted whole or refused whole, with every problem
// (up to a screenful) addressed by a JSON pointer, under code.
func ParseBatch[T any](body []byte, batch bool, max int, what, code string,
	parse func(raw json.RawMessage, bad func(field, code, msg string, args ...any)) T) ([]T, error) {
	raws, err := Split(body, batch)
	if err != nil {
		return nil, err
	}
	if max > 0 && len(raws) > max {
		return nil, errdefs.Invalid("batch_too_large", "a batch may hold at most %d %s; this one holds %d — split it", max, what, len(raws))
	}
	problems := NewProblems(batch)
	out := make([]T, 0, len(raws))
	for i, raw := range raws {
		before := problems.Len()
		v := parse(raw, problems.At(i))
		if problems.Full() {
			break
		}
		if problems.Len() == before {
			out = append(out, v)
		}
	}
	if err := problems.Err(code); err != nil {
		return nil, err
	}
	return out, nil
}

// Problems collects field errors across a batch, addressed by the event's
// index when the body was a batch.
type Problems struct {
	batch bool
	list  []errdefs.FieldError
}

// NewProblems starts a collection for a body that was a batch or not.
func NewProblems(batch bool) *Problems { return &Problems{batch: batch} }

// At returns the function that reports a problem with field (a JSON pointer
// inside event i, "" for the event itself).
func (p *Problems) At(i int) func(field, code, msg string, args ...any) {
	prefix := ""
	if p.batch {
		prefix = "/" + strconv.Itoa(i)
	}
	return func(field, code, msg string, args ...any) {
		at := prefix
		if field != "" || prefix == "" {
			at += "/" + field
		}
		p.list = append(p.list, errdefs.FieldError{Field: at, Code: code, Message: fmt.Sprintf(msg, args...)})
	}
}

// Len is how many problems were found so far.
func (p *Problems) Len() int { return len(p.list) }

// Full reports whether enough problems were found to stop looking.
func (p *Problems) Full() bool { return len(p.list) >= maxProblems }

// Err is the refusal with every problem (code names the kind of event), or
// nil when there was none.
func (p *Problems) Err(code string) error {
	if len(p.list) == 0 {
		return nil
	}
	e := errdefs.Validation(p.list)
	e.Code = code
	return e
}

// Decode checks one event's envelope and reports each problem through bad.
// now stands in for a missing time. The data is checked to be a JSON object
// when required is true, or absent/null/object otherwise; its content is
// the caller's.
func Decode(raw json.RawMessage, now time.Time, dataRequired bool, bad func(field, code, msg string, args ...any)) Envelope {
	var w wireEvent
	if err := json.Unmarshal(raw, &w); err != nil {
		bad("", "malformed_event", "is not a CloudEvents JSON object: %v", err)
		return Envelope{}
	}
	if w.SpecVersion != "1.0" {
		bad("specversion", "unsupported", "must be \"1.0\"")
	}
	switch {
	case w.ID == "" || len(w.ID) > MaxIDLen:
		bad("id", "required", "is required: 1 to %d characters, unique per source", MaxIDLen)
	case !Printable(w.ID):
		bad("id", "invalid", "must be UTF-8 text without control characters (NUL, newlines, …)")
	}
	switch {
	case w.Source == "" || len(w.Source) > MaxSourceLen:
		bad("source", "required", "is required: a URI reference of at most %d characters", MaxSourceLen)
	case !Printable(w.Source):
		bad("source", "invalid", "must be UTF-8 text without control characters (NUL, newlines, …)")
	}
	switch {
	case w.Type == "":
		bad("type", "required", "is required")
	case len(w.Type) > MaxTypeLen || !Printable(w.Type):
		bad("type", "invalid", "must be printable text of at most %d characters", MaxTypeLen)
	}
	for _, f := range []struct{ name, v string }{{"subject", w.Subject}, {"projectid", w.ProjectID}, {"correlationid", w.CorrelationID}} {
		if len(f.v) > MaxIDLen || !Printable(f.v) {
			bad(f.name, "invalid", "must be printable text of at most %d characters", MaxIDLen)
		}
	}
	if w.DataContentType != "" && !strings.HasPrefix(w.DataContentType, "application/json") {
		bad("datacontenttype", "unsupported", "must be application/json when set")
	}
	ev := Envelope{ID: w.ID, Source: w.Source, Type: w.Type, Subject: w.Subject, ProjectID: w.ProjectID,
		CorrelationID: w.CorrelationID, Time: now, Data: w.Data}
	if w.Time != "" {
		t, err := time.Parse(time.RFC3339Nano, w.Time)
		if err != nil {
			bad("time", "invalid_time", "must be an RFC 3339 timestamp")
		}
		ev.Time = t.UTC()
	}
	data := bytes.TrimSpace(w.Data)
	switch {
	case len(data) > 0 && data[0] == '{':
	case !dataRequired && (len(data) == 0 || string(data) == "null"):
		ev.Data = nil
	default:
		bad("data", "required", "must be a JSON object")
	}
	return ev
}
