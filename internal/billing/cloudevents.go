package billing

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/gpuaas/gpuaas/internal/cloudevents"
)

// Media types of the CloudEvents JSON format (structured mode).
const (
	MediaTypeEvent = cloudevents.MediaTypeEvent
	MediaTypeBatch = cloudevents.MediaTypeBatch
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

type wireUsage struct {
	UsageUnit string          `json:"usage_unit"`
	Quantity  json.RawMessage `json:"quantity"`
	StartTime string          `json:"start_time"`
}

// MaxQuantity is the most units one usage event may carry (10^9: a billion
// tokens or 31 years of GPU-seconds; report more as several events). Every
// accepted quantity can be rated: MaxQuantity × any price the platform
// accepts (MaxUnitPriceMicros) still fits in 64 bits.
const MaxQuantity = 1_000_000_000

// ParseUsageEvents reads a structured-mode body: one event (batch false) or
// a JSON array of events (batch true). now is the receive time, used when an
// event has no time. Every problem is reported, each addressed by a JSON
// pointer to the event and field, and nothing is accepted unless all are
// valid: a batch is recorded whole or not at all.
func ParseUsageEvents(body []byte, batch bool, now time.Time) ([]UsageEvent, error) {
	return cloudevents.ParseBatch(body, batch, 0, "", "invalid_usage_event",
		func(raw json.RawMessage, bad func(field, code, msg string, args ...any)) UsageEvent {
			return parseOne(raw, now, bad)
		})
}

func parseOne(raw json.RawMessage, now time.Time, bad func(field, code, msg string, args ...any)) UsageEvent {
	env := cloudevents.Decode(raw, now, true, bad)
	ev := UsageEvent{ID: env.ID, Source: env.Source, Type: env.Type, Subject: env.Subject, ProjectID: env.ProjectID,
		CorrelationID: env.CorrelationID, Time: env.Time}
	if len(env.Data) == 0 {
		return ev
	}
	var d wireUsage
	dec := json.NewDecoder(bytes.NewReader(env.Data))
	dec.UseNumber()
	if err := dec.Decode(&d); err != nil {
		bad("data", "invalid", "must be an object with usage_unit (string) and quantity (integer): %v", err)
		return ev
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
	return ev
}
