package registry

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/distribution/distribution/v3/configuration"
	"github.com/distribution/distribution/v3/registry/auth"
)

// liveAuthName is the access controller the embedded registry is
// configured with: distribution's token controller reads its trusted keys
// once, from a file, so liveAccess builds one per key set and swaps it in
// whole when the set changes (Registry.SetKeys), without a restart.
const liveAuthName = "gpuaas-live-token"

func init() {
	if err := auth.Register(liveAuthName, func(options map[string]any) (auth.AccessController, error) {
		live, ok := options["live"].(*liveAccess)
		if !ok {
			return nil, fmt.Errorf("%s: no key set to follow", liveAuthName)
		}
		return live, nil
	}); err != nil {
		panic(err)
	}
}

// liveState is one key set with the token access controller that trusts
// exactly its keys (nil in external mode, where no registry runs here).
type liveState struct {
	keys   *KeySet
	access auth.AccessController
}

// liveAccess is the embedded registry's token access controller, following
// the current key set.
type liveAccess struct {
	params configuration.Parameters // the token controller's, less jwks
	state  atomic.Pointer[liveState]
	// unknownKey is asked, when a token names a key the set does not hold,
	// to reload the set (another replica may have rotated); it throttles
	// itself. Nil: nothing to ask.
	unknownKey func()
}

// Authorized checks the request's token against the current key set,
// asking for a reload first when the token names a key the set lacks.
func (l *liveAccess) Authorized(req *http.Request, access ...auth.Access) (*auth.Grant, error) {
	if kid := bearerKID(req); kid != "" && l.unknownKey != nil && !slices.Contains(l.state.Load().keys.KeyIDs(), kid) {
		l.unknownKey()
	}
	return l.state.Load().access.Authorized(req, access...)
}

// set builds the token access controller trusting keys and makes it
// current. Keys the current controller already trusts, in the same order
// (a kid is its key's thumbprint, the signing key's first), keep it: every
// periodic reload hands the set over, and it rarely changes.
func (l *liveAccess) set(keys *KeySet) error {
	if cur := l.state.Load(); cur != nil && slices.Equal(cur.keys.KeyIDs(), keys.KeyIDs()) {
		return nil
	}
	access, err := tokenAccess(l.params, keys)
	if err != nil {
		return err
	}
	l.state.Store(&liveState{keys: keys, access: access})
	return nil
}

// tokenAccess is distribution's token access controller configured with
// params and trusting exactly keys. It reads its keys only from a file:
// they go through a private temp file removed at once.
func tokenAccess(params configuration.Parameters, keys *KeySet) (auth.AccessController, error) {
	jwks, err := keys.JWKS()
	if err != nil {
		return nil, err
	}
	f, err := os.CreateTemp("", "gpuaas-registry-jwks-*.json")
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(jwks); err != nil {
		f.Close()
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	opts := configuration.Parameters{"jwks": f.Name()}
	for k, v := range params {
		opts[k] = v
	}
	access, err := auth.GetAccessController("token", opts)
	if err != nil {
		return nil, fmt.Errorf("configure embedded registry auth: %w", err)
	}
	return access, nil
}

// bearerKID is the kid header of the request's bearer token, unverified
// (it only decides whether to reload), or "".
func bearerKID(req *http.Request) string {
	scheme, raw, ok := strings.Cut(req.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return ""
	}
	head, _, ok := strings.Cut(raw, ".")
	if !ok {
		return ""
	}
	b, err := base64.RawURLEncoding.DecodeString(head)
	if err != nil {
		return ""
	}
	var h struct {
		KID string `json:"kid"`
	}
	if json.Unmarshal(b, &h) != nil {
		return ""
	}
	return h.KID
}

// SetKeys replaces the token key set: tokens are signed by its signing key
// from now on, and the embedded registry trusts exactly its keys, so a
// token signed by a key left out of it is refused from the next request.
func (r *Registry) SetKeys(keys *KeySet) error {
	if keys == nil {
		return invalidf("registry_config_invalid", "key set needs a signing key")
	}
	if r.live != nil {
		if err := r.live.set(keys); err != nil {
			return err
		}
	}
	r.tokens.keys.Store(keys)
	return nil
}
