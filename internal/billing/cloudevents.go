package billing

import (
	"bytes"
	"encoding/json"
	"errors"
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

// UsageEvent is one app usage event: a CloudEvents 1.0 envelope whose data
// carries the unit and quantity. The pair (Source, ID) identifies it for
// dedupe, as the CloudEvents spec defines uniqueness.
type UsageEvent struct {
	ID            string
	Source        string
	Type          string
	Subject       string // when set, the app instance id
	Time          time.Time
	ProjectID     string // the projectid extension, when set
	CorrelationID string // the correlationid extension, when set
	UsageUnit     string
	Quantity      int64
	StartTime     time.Time // data.start_time, or Time
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

type wireUsage struct {
	UsageUnit string          `json:"usage_unit"`
	Quantity  json.RawMessage `json:"quantity"`
	StartTime string          `json:"start_time"`
}

// Limits on one event's fields, so a dedupe key stays small and every
// accepted quantity can be rated: MaxQuantity × any price the platform
// accepts (MaxUnitPriceMicros) still fits in 64 bits.
const (
	maxIDLen     = 256
	maxSourceLen = 1024
	// MaxQuantity is the most units one usage event may carry (10^9: a
	// billion tokens or 31 years of GPU-seconds; report more as several
	// events).
	MaxQuantity = 1_000_000_000
)

// printable reports whether s is valid UTF-8 with no control characters
// (NUL included): the same text on both dialects, and one a person can read.
func printable(s string) bool {
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

// ParseUsageEvents reads a structured-mode body: one event (batch false) or
// a JSON array of events (batch true). now is the receive time, used when an
// event has no time. Every problem is reported, each addressed by a JSON
// pointer to the event and field, and nothing is accepted unless all are
// valid: a batch is recorded whole or not at all.
func ParseUsageEvents(body []byte, batch bool, now time.Time) ([]UsageEvent, error) {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return nil, errdefs.Invalid("empty_body", "the request body is empty; send a CloudEvents 1.0 JSON event (or an array of them with %s)", MediaTypeBatch)
	}
	var raws []json.RawMessage
	if batch {
		if body[0] != '[' {
			return nil, errdefs.Invalid("malformed_batch", "a %s body must be a JSON array of events", MediaTypeBatch)
		}
		if err := json.Unmarshal(body, &raws); err != nil {
			return nil, errdefs.Invalid("malformed_json", "the batch is not valid JSON: %v", err)
		}
		if len(raws) == 0 {
			return nil, errdefs.Invalid("empty_batch", "the batch holds no events")
		}
	} else {
		if body[0] != '{' {
			return nil, errdefs.Invalid("malformed_event", "a %s body must be one JSON object; send arrays as %s", MediaTypeEvent, MediaTypeBatch)
		}
		raws = []json.RawMessage{body}
	}
	out := make([]UsageEvent, 0, len(raws))
	var problems []errdefs.FieldError
	for i, raw := range raws {
		prefix := ""
		if batch {
			prefix = "/" + strconv.Itoa(i)
		}
		ev, fe := parseOne(raw, prefix, now)
		if len(fe) > 0 {
			problems = append(problems, fe...)
			if len(problems) >= 20 {
				break // enough to act on; the rest likely repeat
			}
			continue
		}
		out = append(out, ev)
	}
	if len(problems) > 0 {
		e := errdefs.Validation(problems)
		e.Code = "invalid_usage_event"
		return nil, e
	}
	return out, nil
}

func parseOne(raw json.RawMessage, prefix string, now time.Time) (UsageEvent, []errdefs.FieldError) {
	var w wireEvent
	var fe []errdefs.FieldError
	bad := func(field, code, msg string, args ...any) {
		fe = append(fe, errdefs.FieldError{Field: prefix + "/" + field, Code: code, Message: fmt.Sprintf(msg, args...)})
	}
	if err := json.Unmarshal(raw, &w); err != nil {
		bad("", "malformed_event", "is not a CloudEvents JSON object: %v", err)
		return UsageEvent{}, fe
	}
	if w.SpecVersion != "1.0" {
		bad("specversion", "unsupported", "must be \"1.0\"")
	}
	switch {
	case w.ID == "" || len(w.ID) > maxIDLen:
		bad("id", "required", "is required: 1 to %d characters, unique per source", maxIDLen)
	case !printable(w.ID):
		bad("id", "invalid", "must be UTF-8 text without control characters (NUL, newlines, …)")
	}
	switch {
	case w.Source == "" || len(w.Source) > maxSourceLen:
		bad("source", "required", "is required: a URI reference of at most %d characters", maxSourceLen)
	case !printable(w.Source):
		bad("source", "invalid", "must be UTF-8 text without control characters (NUL, newlines, …)")
	}
	if w.Type == "" {
		bad("type", "required", "is required (for example \"gpuaas.usage.v1\")")
	}
	if w.DataContentType != "" && !strings.HasPrefix(w.DataContentType, "application/json") {
		bad("datacontenttype", "unsupported", "must be application/json when set")
	}
	ev := UsageEvent{ID: w.ID, Source: w.Source, Type: w.Type, Subject: w.Subject, ProjectID: w.ProjectID,
		CorrelationID: w.CorrelationID, Time: now}
	if w.Time != "" {
		t, err := time.Parse(time.RFC3339Nano, w.Time)
		if err != nil {
			bad("time", "invalid_time", "must be an RFC 3339 timestamp")
		}
		ev.Time = t.UTC()
	}
	var d wireUsage
	dec := json.NewDecoder(bytes.NewReader(w.Data))
	dec.UseNumber()
	if len(w.Data) == 0 || w.Data[0] != '{' {
		bad("data", "required", "must be an object with usage_unit and quantity")
		return ev, fe
	}
	if err := dec.Decode(&d); err != nil {
		bad("data", "invalid", "must be an object with usage_unit (string) and quantity (integer): %v", err)
		return ev, fe
	}
	ev.UsageUnit = d.UsageUnit
	if d.UsageUnit == "" {
		bad("data/usage_unit", "required", "is required: the unit the app's manifest declares in metering.kind")
	}
	// A JSON number only: a quoted "42" is a string, not a quantity.
	lit := string(bytes.TrimSpace(d.Quantity))
	q, err := strconv.ParseInt(lit, 10, 64)
	switch {
	case lit == "" || lit == "null":
		bad("data/quantity", "required", "is required: a whole number of units")
	case lit[0] == '"':
		bad("data/quantity", "invalid", "must be a JSON number, not a string: a whole number of units")
	case err != nil && errors.Is(err, strconv.ErrRange) && lit[0] != '-':
		bad("data/quantity", "out_of_range", "must be between 0 and %d", int64(MaxQuantity))
	case err != nil:
		bad("data/quantity", "invalid", "must be a whole number of units (no fractions, no exponent)")
	case q < 0 || q > MaxQuantity:
		bad("data/quantity", "out_of_range", "must be between 0 and %d", int64(MaxQuantity))
	}
	ev.Quantity = q
	ev.StartTime = ev.Time
	if d.StartTime != "" {
		t, err := time.Parse(time.RFC3339Nano, d.StartTime)
		switch {
		case err != nil:
			bad("data/start_time", "invalid_time", "must be an RFC 3339 timestamp")
		case t.After(ev.Time):
			bad("data/start_time", "invalid_interval", "must not be after the event time (the end of the interval)")
		default:
			ev.StartTime = t.UTC()
		}
	}
	return ev, fe
}
