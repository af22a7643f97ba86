package artifacts

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/gpuaas/gpuaas/internal/clock"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/registry"
	"github.com/gpuaas/gpuaas/internal/sealer"
	"github.com/gpuaas/gpuaas/internal/signature"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// RegistryKeyPurpose is the signing_keys purpose of registry token keys.
const RegistryKeyPurpose = "registry_token"

// LoadRegistryKeys returns the registry token key set every replica shares:
// the keys live in signing_keys (private halves sealed), and the set follows
// the rule of every token key set (RegistryKeySet). The first start creates
// one; replicas starting together store one between them
// (InsertFirstSigningKey). now stamps a created key (nil: the wall clock).
func LoadRegistryKeys(ctx context.Context, db iam.KeyStore, s *sealer.Sealer, now func() time.Time) (*registry.KeySet, error) {
	rows, err := db.SigningKeys(ctx, RegistryKeyPurpose)
	if err != nil {
		return nil, fmt.Errorf("load registry token keys: %w", err)
	}
	if !slices.ContainsFunc(rows, func(k iam.SigningKey) bool { return k.RetiredAt.IsZero() }) {
		k, err := NewRegistrySigningKey(s, now)
		if err != nil {
			return nil, err
		}
		if _, err := db.InsertFirstSigningKey(ctx, k); err != nil {
			return nil, fmt.Errorf("store registry token key: %w", err)
		}
	}
	return RegistryKeySet(ctx, db, s, now)
}

// RegistryKeySet reads the registry token keys again (a replica reloads
// them periodically, and when handed a token of a key it does not know):
// the newest unretired key signs, every unretired key verifies, and a
// retired key does neither, as in the access token keyring. now stamps the
// audit rows of keys it reseals (nil: the wall clock).
func RegistryKeySet(ctx context.Context, db iam.KeyStore, s *sealer.Sealer, now func() time.Time) (*registry.KeySet, error) {
	rows, err := db.SigningKeys(ctx, RegistryKeyPurpose)
	if err != nil {
		return nil, fmt.Errorf("load registry token keys: %w", err)
	}
	if err := iam.ResealSigningKeys(ctx, db, s, RegistryKeyPurpose, rows, now); err != nil {
		return nil, fmt.Errorf("registry token keys: %w", err)
	}
	rows = slices.DeleteFunc(rows, func(k iam.SigningKey) bool { return !k.RetiredAt.IsZero() })
	if len(rows) == 0 {
		return nil, fmt.Errorf("registry token keys: every key is retired: add one with gpuaas keys rotate --purpose %s", RegistryKeyPurpose)
	}
	// Rows come oldest first.
	last := rows[len(rows)-1]
	raw, err := iam.OpenSigningKey(s, RegistryKeyPurpose, last)
	if err != nil {
		return nil, fmt.Errorf("registry token key: %w", err)
	}
	signing, err := registry.ParseSigningKeyPEM(raw)
	if err != nil {
		return nil, fmt.Errorf("registry token key %s: %w", last.KID, err)
	}
	var others []crypto.PublicKey
	for _, r := range rows[:len(rows)-1] {
		pub, err := registry.ParsePublicKeyPEM([]byte(r.PublicKey))
		if err != nil {
			return nil, fmt.Errorf("registry token key %s: %w", r.KID, err)
		}
		others = append(others, pub)
	}
	return registry.NewKeySet(signing, others...)
}

// NewRegistrySigningKey makes a new registry token key, its private half
// sealed, stamped by now (nil: the wall clock).
func NewRegistrySigningKey(s *sealer.Sealer, now func() time.Time) (iam.SigningKey, error) {
	k, err := registry.GenerateSigningKey(registry.EdDSA)
	if err != nil {
		return iam.SigningKey{}, err
	}
	pemBytes, err := k.MarshalPEM()
	if err != nil {
		return iam.SigningKey{}, err
	}
	sealed, err := iam.SealSigningKey(s, RegistryKeyPurpose, k.KeyID(), pemBytes)
	if err != nil {
		return iam.SigningKey{}, err
	}
	pub, err := signature.MarshalPublicKeyPEM(k.Public())
	if err != nil {
		return iam.SigningKey{}, err
	}
	return iam.SigningKey{KID: k.KeyID(), Purpose: RegistryKeyPurpose, Algorithm: string(k.Algorithm()),
		PrivateKey: sealed, PublicKey: string(pub), CreatedAt: clock.Or(now)()}, nil
}

// credentialSubjectPrefix marks token subjects that are intent credentials.
const credentialSubjectPrefix = "credential:"

// RegistryAuthorizer is the registry's view of the service: it checks the
// credentials intents handed out.
func (s *Service) RegistryAuthorizer() registry.Authorizer { return registryAuthz{s} }

type registryAuthz struct{ s *Service }

// Authenticate checks a username (credential id) and secret against the
// stored hash and expiry.
func (a registryAuthz) Authenticate(ctx context.Context, username, password string) (registry.Subject, error) {
	if _, err := uuid.Parse(username); err != nil || password == "" {
		return registry.Subject{}, registry.ErrInvalidCredentials
	}
	c, err := a.s.Store.Read().GetRegistryCredential(ctx, username)
	if errors.Is(err, storage.ErrNotFound) {
		return registry.Subject{}, registry.ErrInvalidCredentials
	}
	if err != nil {
		return registry.Subject{}, err
	}
	if subtle.ConstantTimeCompare([]byte(hashSecret(password)), []byte(c.SecretHash)) != 1 {
		return registry.Subject{}, registry.ErrInvalidCredentials
	}
	if !a.s.Now().Before(c.ExpiresAt) {
		return registry.Subject{}, fmt.Errorf("credential expired at %s: %w", c.ExpiresAt.Format(time.RFC3339), registry.ErrInvalidCredentials)
	}
	it, err := a.s.Store.Read().GetArtifactIntent(ctx, c.ProjectID, c.IntentID)
	if errors.Is(err, storage.ErrNotFound) {
		return registry.Subject{}, registry.ErrInvalidCredentials
	}
	if err != nil {
		return registry.Subject{}, err
	}
	ok, err := ownerMay(ctx, a.s.Store.Read(), a.s.tokenChecker(), it, credentialPerm(c.Actions))
	if err != nil {
		return registry.Subject{}, err
	}
	if !ok {
		return registry.Subject{}, fmt.Errorf("the credential's owner %s is disabled, deleted or lost its role, or the key or session it was created with was revoked: %w", it.CreatedBy, registry.ErrInvalidCredentials)
	}
	// The registry token lives no longer than the credential it was
	// traded for.
	return registry.Subject{ID: credentialSubjectPrefix + c.ID, ExpiresAt: c.ExpiresAt}, nil
}

// Allowed grants a credential its actions on its one repository, while it
// is unexpired and (for pull credentials) its artifact is neither revoked
// nor retired.
func (a registryAuthz) Allowed(ctx context.Context, sub registry.Subject, repository string, requested []string) ([]string, error) {
	id, ok := strings.CutPrefix(sub.ID, credentialSubjectPrefix)
	if !ok {
		return nil, nil
	}
	q := a.s.Store.Read()
	c, err := q.GetRegistryCredential(ctx, id)
	if errors.Is(err, storage.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if c.Repository != repository || !a.s.Now().Before(c.ExpiresAt) {
		return nil, nil
	}
	if c.ArtifactID != "" {
		art, err := q.GetAppArtifact(ctx, c.ProjectID, c.ArtifactID)
		if err != nil {
			if errors.Is(err, storage.ErrNotFound) {
				return nil, nil
			}
			return nil, err
		}
		if !art.RevokedAt.IsZero() || art.LifecycleState == StateRetired {
			return nil, nil
		}
	}
	allowed := strings.Split(c.Actions, ",")
	var out []string
	for _, r := range requested {
		if slices.Contains(allowed, r) {
			out = append(out, r)
		}
	}
	return out, nil
}

// newSecret returns a random 256-bit secret with a readable prefix.
func newSecret(prefix string) string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return prefix + base64.RawURLEncoding.EncodeToString(b)
}

// hashSecret is the stored form of a high-entropy secret (sha256 suffices:
// the secrets are 256-bit random, not passwords).
func hashSecret(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// ManifestDenied refuses to serve a digest revoked in the project the
// repository belongs to, whoever asks, whichever tag or intent led there
// and whichever of the project's repositories holds it: revocation is of
// the content, project-wide, as registration applies it.
func (a registryAuthz) ManifestDenied(ctx context.Context, repository, digest string) (bool, error) {
	if digest == "" {
		return false, nil
	}
	return a.s.Store.Read().RepositoryDigestRevoked(ctx, repository, digest)
}

// TagFrozen freezes the cosign signature and attestation tags of a digest
// once an artifact with that digest was verified: publish credentials cover
// the app's whole repository, and an intent for one version must not be
// able to swap the signature another version was verified against.
func (a registryAuthz) TagFrozen(ctx context.Context, repository, tag string) (bool, error) {
	d, ok := registry.SignatureTagDigest(tag)
	if !ok {
		return false, nil
	}
	return a.s.Store.Read().RepositoryDigestVerified(ctx, repository, d)
}
