package artifacts

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/sealer"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// Secret is registry credential material delivered through a wrap.
type Secret struct {
	Username   string    `json:"username"`
	Password   string    `json:"password"`
	Registry   string    `json:"registry"`
	Repository string    `json:"repository"`
	Actions    []string  `json:"actions"`
	ExpiresAt  time.Time `json:"expires_at"`
}

// CredentialVault wraps secrets behind single-use, short-lived wrapping
// tokens (response wrapping in Vault/OpenBao terms). The built-in vault keeps
// them sealed in the database; a Vault or OpenBao backend can replace it
// (it would ignore tx and call sys/wrapping/wrap and sys/wrapping/unwrap).
type CredentialVault interface {
	// Wrap stores secret and returns a wrapping token valid until expiresAt.
	Wrap(ctx context.Context, tx Tx, secret Secret, expiresAt time.Time) (token string, err error)
	// Unwrap exchanges a wrapping token for its secret exactly once. An
	// unknown, expired or already used token is an errdefs FailedPrecondition.
	Unwrap(ctx context.Context, tx Tx, token string) (Secret, error)
}

// BuiltinVault is the CredentialVault on the control plane's own database:
// the token is stored as its sha256, the secret sealed with the master key
// (bound to the token hash) and erased when unwrapped.
type BuiltinVault struct {
	Sealer *sealer.Sealer
	Now    func() time.Time
}

// WrapTokenPrefix starts every wrapping token the built-in vault issues.
const WrapTokenPrefix = "gpw_"

// Wrap implements CredentialVault.
func (v *BuiltinVault) Wrap(ctx context.Context, tx Tx, secret Secret, expiresAt time.Time) (string, error) {
	token := newSecret(WrapTokenPrefix)
	raw, err := json.Marshal(secret)
	if err != nil {
		return "", err
	}
	h := hashSecret(token)
	sealed, err := v.Sealer.Seal(raw, "credential_wrap:"+h)
	if err != nil {
		return "", err
	}
	if err := tx.InsertCredentialWrap(ctx, CredentialWrap{TokenHash: h, Sealed: sealed, CreatedAt: v.Now(), ExpiresAt: expiresAt}); err != nil {
		return "", err
	}
	return token, nil
}

// ErrWrapInvalid is the cause of every refused unwrap.
var ErrWrapInvalid = errors.New("artifacts: wrapping token unknown, expired or already used")

func wrapInvalid() error {
	return errdefs.FailedPrecondition("wrapping_token_invalid",
		"the wrapping token is unknown, expired or already used (it unwraps once); request a new intent").WithCause(ErrWrapInvalid)
}

// Unwrap implements CredentialVault.
func (v *BuiltinVault) Unwrap(ctx context.Context, tx Tx, token string) (Secret, error) {
	h := hashSecret(token)
	sealed, err := tx.ConsumeCredentialWrap(ctx, h, v.Now())
	if errors.Is(err, storage.ErrNotFound) {
		return Secret{}, wrapInvalid()
	}
	if err != nil {
		return Secret{}, err
	}
	raw, err := v.Sealer.Open(sealed, "credential_wrap:"+h)
	if err != nil {
		return Secret{}, err
	}
	var s Secret
	if err := json.Unmarshal(raw, &s); err != nil {
		return Secret{}, err
	}
	return s, nil
}
