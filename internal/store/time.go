package store

import (
	"database/sql/driver"
	"fmt"
	"time"

	"github.com/gpuaas/gpuaas/internal/storage"
)

// Timestamps are written as fixed-width UTC text with microseconds. PostgreSQL
// parses that into timestamptz; SQLite keeps the text, whose fixed width makes
// string order equal time order, so range filters work on both.
const timeLayout = "2006-01-02T15:04:05.000000Z"

func ts(t time.Time) string { return t.UTC().Format(timeLayout) }

// timeBound is one time bound of a list filter: the filter's name, its
// condition on the time column ("occurred_at >= ?") and the time (zero:
// no bound).
type timeBound struct {
	name, cond string
	t          time.Time
}

// addTimeBounds adds the condition of each bound given, refusing one the
// store cannot hold (storage.CheckTime) as the caller's error.
func addTimeBounds(add func(cond string, v any), bounds ...timeBound) error {
	for _, b := range bounds {
		if b.t.IsZero() {
			continue
		}
		if err := storage.CheckTime(b.name, b.t); err != nil {
			return err
		}
		add(b.cond, ts(b.t))
	}
	return nil
}

// nullTS returns nil for the zero time so nullable columns stay NULL.
func nullTS(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return ts(t)
}

// timeScanner reads a timestamp column of either dialect.
type timeScanner struct{ t *time.Time }

func (s timeScanner) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*s.t = time.Time{}
		return nil
	case time.Time:
		*s.t = v.UTC()
		return nil
	case string:
		return s.parse(v)
	case []byte:
		return s.parse(string(v))
	}
	return fmt.Errorf("store: cannot scan %T into time", src)
}

func (s timeScanner) parse(v string) error {
	for _, layout := range []string{timeLayout, time.RFC3339Nano, "2006-01-02 15:04:05.999999999-07:00"} {
		if t, err := time.Parse(layout, v); err == nil {
			*s.t = t.UTC()
			return nil
		}
	}
	return fmt.Errorf("store: unparseable time %q", v)
}

func scanTime(t *time.Time) timeScanner { return timeScanner{t: t} }

var _ driver.Valuer = jsonText(nil)

// jsonText is a JSON document stored in jsonb (PostgreSQL) or TEXT (SQLite).
type jsonText []byte

func (j jsonText) Value() (driver.Value, error) {
	if j == nil {
		return nil, nil
	}
	return string(j), nil
}

// jsonScanner reads a JSON column into a []byte, nil for NULL.
type jsonScanner struct{ b *[]byte }

func (s jsonScanner) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*s.b = nil
	case string:
		*s.b = []byte(v)
	case []byte:
		*s.b = append([]byte(nil), v...)
	default:
		return fmt.Errorf("store: cannot scan %T into json", src)
	}
	return nil
}

func scanJSON(b *[]byte) jsonScanner { return jsonScanner{b: b} }
