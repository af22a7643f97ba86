package iam

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
	"github.com/gpuaas/gpuaas/internal/clock"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/sealer"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// Keyring holds the Ed25519 keys the control plane signs one kind of token
// with. Keys live in the database (private halves sealed) so every replica
// signs and verifies with the same set: the newest unretired key signs,
// every unretired key verifies, and a retired key does neither (retiring is
// how an operator stops trusting a leaked key).
type Keyring struct {
	keys    KeyStore
	sealer  *sealer.Sealer
	purpose string
	now     func() time.Time // stamps the keys it creates (the server's clock)

	// reloading serializes reloads (reload).
	reloading sync.Mutex
	mu        sync.RWMutex
	signing   *ringKey
	byKID     map[string]*ringKey
	// lastReload is when the set was last read, by the wall clock: it
	// only throttles reloads, and is never stored or compared with a
	// stamped time.
	lastReload time.Time
}

// ReloadEvery bounds how often an unknown kid may trigger a reload, so a
// flood of forged tokens cannot turn into a flood of database reads (the
// registry's token keys reload under the same bound): one small read a
// second at most. It is also how long a replica may refuse the tokens of a
// key another replica has just begun to sign with (it read the keys just
// before the rotate), so it is kept short.
const ReloadEvery = time.Second

// ReloadIfStale reloads the key set unless it was loaded recently; it reports
// whether it reloaded.
func (k *Keyring) ReloadIfStale(ctx context.Context) bool {
	fresh := func() bool {
		k.mu.RLock()
		defer k.mu.RUnlock()
		return time.Since(k.lastReload) < ReloadEvery
	}
	if fresh() {
		return false
	}
	k.reloading.Lock()
	defer k.reloading.Unlock()
	if fresh() { // read by the caller this one waited for
		return false
	}
	return k.reload(ctx, time.Now()) == nil
}

type ringKey struct {
	kid  string
	priv ed25519.PrivateKey
	pub  ed25519.PublicKey
}

// LoadKeyring loads the keys of purpose, creating the first one if none
// exist; now stamps the keys it creates (nil: the wall clock).
func LoadKeyring(ctx context.Context, keys KeyStore, s *sealer.Sealer, purpose string, now func() time.Time) (*Keyring, error) {
	k := &Keyring{keys: keys, sealer: s, purpose: purpose, now: clock.Or(now)}
	if err := k.Reload(ctx); err != nil {
		return nil, err
	}
	if k.signing == nil {
		// The first start: one key for every replica starting with it.
		first, err := NewSigningKey(s, purpose, k.now)
		if err != nil {
			return nil, err
		}
		if _, err := keys.InsertFirstSigningKey(ctx, first); err != nil {
			return nil, fmt.Errorf("store signing key: %w", err)
		}
		if err := k.Reload(ctx); err != nil {
			return nil, err
		}
	}
	return k, nil
}

// Reload reads the key set again (another replica may have rotated).
func (k *Keyring) Reload(ctx context.Context) error {
	k.reloading.Lock()
	defer k.reloading.Unlock()
	return k.reload(ctx, time.Now())
}

// reload reads the key set, begun at began by the wall clock; the caller
// holds k.reloading, so a slow read cannot put back a set older than the
// one a later read installed (a key retired in between would verify
// again).
func (k *Keyring) reload(ctx context.Context, began time.Time) error {
	k.mu.Lock()
	k.lastReload = began
	k.mu.Unlock()
	rows, err := k.keys.SigningKeys(ctx, k.purpose)
	if err != nil {
		return fmt.Errorf("load %s signing keys: %w", k.purpose, err)
	}
	if err := ResealSigningKeys(ctx, k.keys, k.sealer, k.purpose, rows, k.now); err != nil {
		return err
	}
	byKID := map[string]*ringKey{}
	var signing *ringKey
	for _, r := range rows {
		if !r.RetiredAt.IsZero() {
			continue
		}
		raw, err := OpenSigningKey(k.sealer, k.purpose, r)
		if err != nil {
			return err
		}
		if len(raw) != ed25519.PrivateKeySize {
			return fmt.Errorf("signing key %s: bad length", r.KID)
		}
		priv := ed25519.PrivateKey(raw)
		rk := &ringKey{kid: r.KID, priv: priv, pub: priv.Public().(ed25519.PublicKey)}
		byKID[r.KID] = rk
		signing = rk // rows come oldest first: the newest signs
	}
	k.mu.Lock()
	k.byKID, k.signing = byKID, signing
	k.mu.Unlock()
	return nil
}

// Rotate adds a new signing key; older keys keep verifying.
func (k *Keyring) Rotate(ctx context.Context) error {
	key, err := NewSigningKey(k.sealer, k.purpose, k.now)
	if err != nil {
		return err
	}
	if err := k.keys.InsertSigningKey(ctx, key); err != nil {
		return fmt.Errorf("store signing key: %w", err)
	}
	return k.Reload(ctx)
}

// NewSigningKey makes a new Ed25519 key of purpose, the kind a Keyring
// holds, its private half sealed and stamped by now (nil: the wall clock).
func NewSigningKey(s *sealer.Sealer, purpose string, now func() time.Time) (SigningKey, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return SigningKey{}, err
	}
	kid := uuid.Must(uuid.NewV7()).String()
	sealed, err := SealSigningKey(s, purpose, kid, priv)
	if err != nil {
		return SigningKey{}, err
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return SigningKey{}, err
	}
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	return SigningKey{KID: kid, Purpose: purpose, Algorithm: "EdDSA", PrivateKey: sealed, PublicKey: string(pubPEM), CreatedAt: clock.Or(now)()}, nil
}

// Sign signs claims with the current key, setting the kid header.
func (k *Keyring) Sign(claims jwt.Claims) (string, error) {
	k.mu.RLock()
	key := k.signing
	k.mu.RUnlock()
	if key == nil {
		return "", errors.New("iam: keyring has no signing key")
	}
	t := jwt.NewWithClaims(jwt.SigningMethodEdDSA, claims)
	t.Header["kid"] = key.kid
	return t.SignedString(key.priv)
}

// Keyfunc resolves a token's verification key by its kid header.
func (k *Keyring) Keyfunc(t *jwt.Token) (any, error) {
	kid, _ := t.Header["kid"].(string)
	k.mu.RLock()
	key := k.byKID[kid]
	k.mu.RUnlock()
	if key == nil {
		return nil, fmt.Errorf("unknown signing key %q", kid)
	}
	return key.pub, nil
}

// SigningKey returns the current signing key and its id (for components,
// such as the registry verifier, that need the raw key).
func (k *Keyring) SigningKey() (kid string, priv ed25519.PrivateKey) {
	k.mu.RLock()
	defer k.mu.RUnlock()
	if k.signing == nil {
		return "", nil
	}
	return k.signing.kid, k.signing.priv
}

// JWK is one public key in JSON Web Key form.
type JWK struct {
	KTY string `json:"kty"`
	CRV string `json:"crv"`
	X   string `json:"x"`
	KID string `json:"kid"`
	ALG string `json:"alg"`
	USE string `json:"use"`
}

// JWKS returns every verification key as a JSON Web Key Set.
func (k *Keyring) JWKS() map[string][]JWK {
	k.mu.RLock()
	defer k.mu.RUnlock()
	keys := make([]JWK, 0, len(k.byKID))
	for _, rk := range k.byKID {
		keys = append(keys, JWK{KTY: "OKP", CRV: "Ed25519", X: base64.RawURLEncoding.EncodeToString(rk.pub), KID: rk.kid, ALG: "EdDSA", USE: "sig"})
	}
	return map[string][]JWK{"keys": keys}
}

// A signing key's private half is sealed under its purpose and its kid
// ("access_token:" + kid), so a sealed key copied into a row of another
// purpose (the release key serving as a token key, say) does not open.
func signingKeyAAD(purpose, kid string) string { return purpose + ":" + kid }

// SealSigningKey seals the private half of the key kid of purpose.
func SealSigningKey(s *sealer.Sealer, purpose, kid string, priv []byte) (string, error) {
	return s.Seal(priv, signingKeyAAD(purpose, kid))
}

// KeyResealer writes back a signing key resealed under its purpose: it
// replaces the sealed private half from with to while the row of kid and
// purpose still holds from (of replicas resealing at once, one writes), in
// its own transaction with the audit row.
type KeyResealer interface {
	ResealSigningKey(ctx context.Context, kid, purpose, from, to string, audit storage.AuditEvent) error
}

// ResealSigningKeys reseals, under its purpose, every key of rows sealed
// before purposes were bound (under its kid alone), writes each back
// through db (which must be a KeyResealer) and updates rows to match, so
// that afterwards each opens only as what it is. Keys that open under their
// purpose, or not at all, are left to OpenSigningKey. Each key written back
// has its audit row (signing_key.reseal), stamped by now (nil: the wall
// clock).
func ResealSigningKeys(ctx context.Context, db KeyStore, s *sealer.Sealer, purpose string, rows []SigningKey, now func() time.Time) error {
	for i, r := range rows {
		if r.Purpose != purpose {
			continue // OpenSigningKey refuses it
		}
		aad := signingKeyAAD(purpose, r.KID)
		if _, err := s.Open(r.PrivateKey, aad); err == nil {
			continue
		}
		raw, err := s.Open(r.PrivateKey, r.KID) // the legacy, kid-only form
		if err != nil {
			continue
		}
		rs, ok := db.(KeyResealer)
		if !ok {
			return fmt.Errorf("signing key %s is sealed under its kid alone and this store cannot reseal it", r.KID)
		}
		sealed, err := s.Seal(raw, aad)
		clear(raw)
		if err != nil {
			return err
		}
		err = rs.ResealSigningKey(ctx, r.KID, purpose, r.PrivateKey, sealed, storage.AuditEvent{
			OccurredAt: clock.Or(now)(), ActorType: string(principal.System), ActorID: principal.SystemActor.ID,
			Action: "signing_key.reseal", ResourceType: "signing_key", ResourceID: r.KID,
			Reason: "sealed under its purpose " + purpose + " as well as its kid", Outcome: "success",
		})
		if err != nil {
			return fmt.Errorf("reseal %s signing key %s: %w", purpose, r.KID, err)
		}
		// Another replica that won the race wrote its own sealing of the
		// same key; this one opens the same.
		rows[i].PrivateKey = sealed
	}
	return nil
}

// OpenSigningKey opens the private half of r as a key of purpose, refusing
// a key of another purpose, or sealed for one (ResealSigningKeys first
// brings keys sealed the legacy way to this form).
func OpenSigningKey(s *sealer.Sealer, purpose string, r SigningKey) ([]byte, error) {
	if r.Purpose != purpose {
		return nil, fmt.Errorf("signing key %s has purpose %s, not %s", r.KID, r.Purpose, purpose)
	}
	raw, err := s.Open(r.PrivateKey, signingKeyAAD(purpose, r.KID))
	if err != nil {
		return nil, fmt.Errorf("signing key %s does not open for purpose %s: sealed for another purpose, under another master key, or tampered", r.KID, purpose)
	}
	return raw, nil
}
