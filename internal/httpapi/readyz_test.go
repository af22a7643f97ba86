package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

type schemaGap struct{ db, bin int }

func (g schemaGap) Error() string                     { return fmt.Sprintf("gap %d %d", g.db, g.bin) }
func (g schemaGap) SchemaGap() (database, binary int) { return g.db, g.bin }

type health struct{ ping, schema error }

func (h health) Ping(context.Context) error        { return h.ping }
func (h health) CheckSchema(context.Context) error { return h.schema }

// /readyz answers anyone: a failed schema check shows the two versions
// when they differ and never a driver's error text, which goes to the log.
func TestReadyzShowsTheSchemaGapAndNoErrorText(t *testing.T) {
	secret := errors.New(`pq: permission denied for table schema_migrations (role "gpuaas_app" on db-7.internal)`)
	for _, c := range []struct {
		schema error
		want   string
	}{
		{nil, "ok"},
		{fmt.Errorf("check: %w", schemaGap{25, 27}), "behind: database 25, binary 27; run gpuaas migrate"},
		{schemaGap{28, 27}, "ahead: database 28, binary 27; run a newer gpuaas"},
		{secret, "unreadable (the server's log has the error)"},
	} {
		var logs strings.Builder
		a := &API{Health: health{schema: c.schema}, Logger: slog.New(slog.NewTextHandler(&logs, nil))}
		w := httptest.NewRecorder()
		if err := a.readyz(w, httptest.NewRequest("GET", "/readyz", nil)); err != nil {
			t.Fatal(err)
		}
		var got struct {
			Status string            `json:"status"`
			Checks map[string]string `json:"checks"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
			t.Fatal(err)
		}
		wantStatus := http.StatusServiceUnavailable
		if c.schema == nil {
			wantStatus = http.StatusOK
		}
		if w.Code != wantStatus || got.Checks["migrations"] != c.want {
			t.Errorf("schema %v: %d %+v, want %d and %q", c.schema, w.Code, got, wantStatus, c.want)
		}
		if strings.Contains(w.Body.String(), "gpuaas_app") || strings.Contains(w.Body.String(), "db-7") {
			t.Errorf("readyz shows the driver's error: %s", w.Body)
		}
		if c.schema == secret && !strings.Contains(logs.String(), "db-7.internal") {
			t.Errorf("the error is not in the log: %s", logs.String())
		}
	}
}
