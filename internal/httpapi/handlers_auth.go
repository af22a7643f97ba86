package httpapi

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/gpuaas/gpuaas/internal/principal"
)

func (a *API) healthz(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	return nil
}

// readyz answers 200 only when the database answers and its schema is the
// one this binary expects.
func (a *API) readyz(w http.ResponseWriter, r *http.Request) error {
	checks := map[string]string{"database": "ok", "migrations": "ok"}
	status := http.StatusOK
	if err := a.Health.Ping(r.Context()); err != nil {
		checks["database"], status = "unreachable", http.StatusServiceUnavailable
	} else if err := a.Health.CheckSchema(r.Context()); err != nil {
		checks["migrations"], status = schemaState(err), http.StatusServiceUnavailable
		a.Logger.WarnContext(r.Context(), "not ready: schema check", "err", err)
	}
	state := "ready"
	if status != http.StatusOK {
		state = "not_ready"
	}
	writeJSON(w, status, map[string]any{"status": state, "checks": checks})
	return nil
}

// schemaState is what /readyz, which anyone may ask, says about a failed
// schema check: the two versions when they differ, and otherwise no more
// than that the check failed (a driver's error text can name tables,
// roles and hosts; it goes to the log).
func schemaState(err error) string {
	var gap interface{ SchemaGap() (database, binary int) }
	if !errors.As(err, &gap) {
		return "unreadable (the server's log has the error)"
	}
	db, bin := gap.SchemaGap()
	if db < bin {
		return fmt.Sprintf("behind: database %d, binary %d; run gpuaas migrate", db, bin)
	}
	return fmt.Sprintf("ahead: database %d, binary %d; run a newer gpuaas", db, bin)
}

func (a *API) jwks(w http.ResponseWriter, r *http.Request) error {
	w.Header().Set("Cache-Control", "public, max-age=300")
	writeJSON(w, http.StatusOK, a.Tokens.Ring.JWKS())
	return nil
}

func (a *API) openapi(w http.ResponseWriter, r *http.Request) error {
	w.Header().Set("Content-Type", "application/yaml")
	w.Header().Set("Vary", "Host")
	_, err := w.Write(withServerOrigin(a.OpenAPI, r))
	return err
}

type loginRequest struct {
	Email    string `json:"email"`
	Password string `json:"password"`
}

func (a *API) login(w http.ResponseWriter, r *http.Request) error {
	var in loginRequest
	if err := decode(r, &in); err != nil {
		return err
	}
	if err := required(map[string]string{"email": in.Email, "password": in.Password}); err != nil {
		return err
	}
	tok, err := a.IAM.Login(r.Context(), in.Email, in.Password)
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, tok)
	return nil
}

type meView struct {
	ID        string        `json:"id"`
	Type      string        `json:"type"`
	Email     string        `json:"email,omitempty"`
	OrgID     string        `json:"org_id,omitempty"`
	ProjectID string        `json:"project_id,omitempty"`
	Bindings  []bindingView `json:"bindings"`
}

func (a *API) me(w http.ResponseWriter, r *http.Request) error {
	p := principal.From(r.Context())
	bs, err := a.Store.Read().BindingsOfPrincipal(r.Context(), string(p.Type), p.ID)
	if err != nil {
		return err
	}
	v := meView{ID: p.ID, Type: string(p.Type), Email: p.Email, OrgID: p.OrgID, ProjectID: p.ProjectID, Bindings: []bindingView{}}
	for _, b := range bs {
		v.Bindings = append(v.Bindings, viewBinding(b))
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}
