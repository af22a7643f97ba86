package httpapi

import (
	"encoding/json"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/serviceaccounts"
)

// tokenRequestMaxBody bounds a token request: an assertion is a few hundred
// bytes, and serviceaccounts.MaxAssertionBytes caps it anyway.
const tokenRequestMaxBody = 16 << 10

type serviceAccountKeyView struct {
	KeyID        string  `json:"key_id"`
	Algorithm    string  `json:"algorithm"`
	PublicKeyPEM string  `json:"public_key_pem"`
	Status       string  `json:"status"` // active | expiring | revoked
	CreatedAt    string  `json:"created_at"`
	ExpiresAt    *string `json:"expires_at"`
}

type serviceAccountView struct {
	ID          string                  `json:"id"`
	OrgID       string                  `json:"org_id"`
	ProjectID   string                  `json:"project_id"`
	Slug        string                  `json:"slug"`
	Name        string                  `json:"name"`
	Description string                  `json:"description"`
	Status      string                  `json:"status"`
	Roles       []string                `json:"roles"`
	Keys        []serviceAccountKeyView `json:"keys"`
	CreatedAt   string                  `json:"created_at"`
	UpdatedAt   string                  `json:"updated_at"`
}

// issuedKeyView answers create and rotate-key: the account, the new key's
// id and, only in this response, its private key.
type issuedKeyView struct {
	serviceAccountView
	KeyID         string `json:"key_id"`
	PrivateKeyPEM string `json:"private_key_pem,omitempty"`
	TokenURL      string `json:"token_url"`
}

func viewServiceAccountKey(k serviceaccounts.ServiceAccountKey, now time.Time) serviceAccountKeyView {
	v := serviceAccountKeyView{KeyID: k.ID, Algorithm: k.Algorithm, PublicKeyPEM: k.PublicKey, Status: "active", CreatedAt: rfc3339(k.CreatedAt)}
	if !k.ExpiresAt.IsZero() {
		e := rfc3339(k.ExpiresAt)
		v.ExpiresAt = &e
		v.Status = "expiring"
		if !k.ActiveAt(now) {
			v.Status = "revoked"
		}
	}
	return v
}

func viewServiceAccount(now time.Time) func(serviceaccounts.Account) serviceAccountView {
	return func(a serviceaccounts.Account) serviceAccountView {
		v := serviceAccountView{ID: a.ID, OrgID: a.OrgID, ProjectID: a.ProjectID, Slug: a.Slug, Name: a.Name, Description: a.Description,
			Status: string(a.Status), Roles: a.Roles, Keys: make([]serviceAccountKeyView, 0, len(a.Keys)),
			CreatedAt: rfc3339(a.CreatedAt), UpdatedAt: rfc3339(a.UpdatedAt)}
		for _, k := range a.Keys {
			v.Keys = append(v.Keys, viewServiceAccountKey(k, now))
		}
		return v
	}
}

// writeIssuedKey writes a response holding a private key, shown once: an
// idempotent replay gets the account and key id without it.
func (a *API) writeIssuedKey(w http.ResponseWriter, status int, k serviceaccounts.IssuedKey) {
	v := issuedKeyView{serviceAccountView: viewServiceAccount(a.SA.Now())(k.Account), KeyID: k.Key.ID, PrivateKeyPEM: k.PrivateKeyPEM, TokenURL: k.TokenURL}
	redacted := v
	redacted.PrivateKeyPEM = ""
	writeSecretJSON(w, status, v, redacted)
}

func (a *API) createServiceAccount(w http.ResponseWriter, r *http.Request) error {
	var in serviceaccounts.CreateInput
	if err := decode(r, &in); err != nil {
		return err
	}
	k, err := a.SA.Create(r.Context(), grantsFrom(r.Context()), r.PathValue("project_id"), in)
	if err != nil {
		return err
	}
	a.writeIssuedKey(w, http.StatusCreated, k)
	return nil
}

func (a *API) listServiceAccounts(w http.ResponseWriter, r *http.Request) error {
	pg, err := page(r)
	if err != nil {
		return err
	}
	as, next, err := a.SA.List(r.Context(), grantsFrom(r.Context()), r.PathValue("project_id"), pg)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, mapList(as, next, viewServiceAccount(a.SA.Now())))
	return nil
}

func (a *API) getServiceAccount(w http.ResponseWriter, r *http.Request) error {
	acc, err := a.SA.Get(r.Context(), grantsFrom(r.Context()), r.PathValue("project_id"), r.PathValue("service_account_id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, viewServiceAccount(a.SA.Now())(acc))
	return nil
}

func (a *API) disableServiceAccount(w http.ResponseWriter, r *http.Request) error {
	acc, err := a.SA.Disable(r.Context(), grantsFrom(r.Context()), r.PathValue("project_id"), r.PathValue("service_account_id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, viewServiceAccount(a.SA.Now())(acc))
	return nil
}

func (a *API) enableServiceAccount(w http.ResponseWriter, r *http.Request) error {
	acc, err := a.SA.Enable(r.Context(), grantsFrom(r.Context()), r.PathValue("project_id"), r.PathValue("service_account_id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, viewServiceAccount(a.SA.Now())(acc))
	return nil
}

func (a *API) rotateServiceAccountKey(w http.ResponseWriter, r *http.Request) error {
	var in serviceaccounts.RotateInput
	// An empty body is a rotation with the defaults.
	if r.ContentLength != 0 {
		if err := decode(r, &in); err != nil {
			return err
		}
	}
	k, err := a.SA.RotateKey(r.Context(), grantsFrom(r.Context()), r.PathValue("project_id"), r.PathValue("service_account_id"), in)
	if err != nil {
		return err
	}
	a.writeIssuedKey(w, http.StatusOK, k)
	return nil
}

func (a *API) deleteServiceAccount(w http.ResponseWriter, r *http.Request) error {
	if err := a.SA.Delete(r.Context(), grantsFrom(r.Context()), r.PathValue("project_id"), r.PathValue("service_account_id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// tokenRequestFields are the fields a token request may carry.
var tokenRequestFields = map[string]bool{"grant_type": true, "assertion": true, "service_account_id": true, "key_id": true}

// serviceAccountToken exchanges a signed JWT assertion (RFC 7523) for an
// access token. It accepts JSON or form encoding. It never accepts a private
// key: the key signs locally and stays where it is.
func (a *API) serviceAccountToken(w http.ResponseWriter, r *http.Request) error {
	f, err := readTokenRequest(r)
	if err != nil {
		if e, ok := errdefs.As(err); ok {
			a.SA.RefuseExchange(r.Context(), serviceaccounts.ServiceAccount{ID: f["service_account_id"]}, e.Code)
		}
		return err
	}
	tok, err := a.SA.Exchange(r.Context(), serviceaccounts.ExchangeInput{
		Assertion: f["assertion"], ServiceAccountID: f["service_account_id"], KeyID: f["key_id"]})
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Pragma", "no-cache")
	writeJSON(w, http.StatusOK, tok)
	return nil
}

// readTokenRequest reads the token request fields and refuses anything but
// the documented ones, naming a private key outright.
func readTokenRequest(r *http.Request) (map[string]string, error) {
	f := map[string]string{}
	nonString := "" // a JSON field whose value is not a string
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt == "application/x-www-form-urlencoded" {
		if err := r.ParseForm(); err != nil {
			return f, decodeError(err)
		}
		for k, vs := range r.PostForm {
			if len(vs) != 1 {
				return f, errdefs.Invalid("invalid_request", "field %q must be sent once", k)
			}
			f[k] = vs[0]
		}
	} else {
		var raw map[string]json.RawMessage
		if err := decode(r, &raw); err != nil {
			return f, err
		}
		for k, v := range raw {
			var s string
			if json.Unmarshal(v, &s) != nil {
				nonString = k
			}
			f[k] = s
		}
	}
	// A private key is named before any other defect of the request.
	for k := range f {
		if isPrivateKeyField(k) {
			delete(f, k)
			return f, errPrivateKeySent
		}
	}
	if nonString != "" {
		return f, errdefs.Invalid("invalid_request", "field %q must be a string", nonString)
	}
	for k := range f {
		if !tokenRequestFields[k] {
			return f, errdefs.Invalid("invalid_request", "unknown field %q; send grant_type and assertion (service_account_id and key_id are optional cross-checks)", k)
		}
	}
	switch f["grant_type"] {
	case serviceaccounts.GrantTypeJWTBearer:
	case "":
		return f, errdefs.Invalid("invalid_request", "grant_type is required: %s", serviceaccounts.GrantTypeJWTBearer)
	default:
		return f, errdefs.Invalid("unsupported_grant_type", "grant_type must be %s", serviceaccounts.GrantTypeJWTBearer)
	}
	if f["assertion"] == "" {
		return f, errdefs.Invalid("invalid_request", "assertion is required: a JWT signed with the service account's private key")
	}
	return f, nil
}

func isPrivateKeyField(name string) bool {
	n := strings.ToLower(name)
	return strings.Contains(n, "private") || strings.Contains(n, "secret")
}

var errPrivateKeySent = errdefs.Invalid("private_key_refused",
	"private keys never travel to the server: sign a JWT assertion locally with the key (gpuaas sa token --key-file, or the Go client's SignAssertion) and send only the assertion; if this key was sent over a network, rotate it")
