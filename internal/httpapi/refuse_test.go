package httpapi

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/registry"
)

// refuseChanges refuses what may change state while Writable has an
// error, in the format of the writer it is given, and passes reads, the
// registry's token endpoint and everything while Writable has none.
func TestRefuseChanges(t *testing.T) {
	var gap error = &errdefs.Error{Kind: errdefs.KindUnavailable, Code: "schema_mismatch", Message: "the schema moved"}
	a := &API{Logger: slog.New(slog.DiscardHandler), Writable: func() error { return gap }}
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	serve := func(h http.Handler, method, path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(method, path, strings.NewReader("{}")))
		return rec
	}
	api, reg := a.refuseChanges(next, a.answerAPI), a.refuseChanges(next, answerRegistry)

	rec := serve(api, http.MethodPost, "/console/launch")
	var envelope struct {
		Error struct{ Code string } `json:"error"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &envelope); rec.Code != http.StatusServiceUnavailable || err != nil || envelope.Error.Code != "schema_mismatch" {
		t.Errorf("API writer: %d %s", rec.Code, rec.Body)
	}
	rec = serve(reg, http.MethodPatch, "/v2/p/app/blobs/uploads/u")
	var docker struct {
		Errors []struct{ Code, Message string } `json:"errors"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &docker); rec.Code != http.StatusServiceUnavailable || err != nil || len(docker.Errors) != 1 || docker.Errors[0].Message != "the schema moved" {
		t.Errorf("registry writer: %d %s", rec.Code, rec.Body)
	}
	for _, h := range []http.Handler{api, reg} {
		for _, r := range [][2]string{{http.MethodGet, "/v2/p/app/manifests/1"}, {http.MethodHead, "/"}, {http.MethodOptions, "/"}, {http.MethodPost, registry.TokenPath}} {
			if rec := serve(h, r[0], r[1]); rec.Code != http.StatusTeapot {
				t.Errorf("%s %s was refused: %d %s", r[0], r[1], rec.Code, rec.Body)
			}
		}
	}
	gap = nil
	if rec := serve(api, http.MethodDelete, "/x"); rec.Code != http.StatusTeapot {
		t.Errorf("a change was refused while writable: %d", rec.Code)
	}
	a.Writable = nil
	if rec := serve(reg, http.MethodPut, "/v2/p/app/manifests/1"); rec.Code != http.StatusTeapot {
		t.Errorf("a change was refused without a guard: %d", rec.Code)
	}
}
