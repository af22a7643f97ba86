package serviceaccounts

import (
	"context"
	"errors"

	"github.com/google/uuid"
	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// GrantTypeJWTBearer is the RFC 7523 grant type of the token exchange.
const GrantTypeJWTBearer = "urn:ietf:params:oauth:grant-type:jwt-bearer"

// ExchangeInput is a token request: the signed assertion, and optionally the
// account and key ids the caller expects it to name (cross-checked).
type ExchangeInput struct {
	Assertion        string
	ServiceAccountID string
	KeyID            string
}

// Exchange verifies a JWT assertion signed with a service-account key and
// mints a short-lived access token for the account. Every refusal is an
// invalid_grant error naming its cause, and leaves a failure audit row (never
// the assertion itself).
func (s *Service) Exchange(ctx context.Context, in ExchangeInput) (iam.Issued, error) {
	acc, tok, err := s.exchange(ctx, in)
	if err != nil {
		if reason := reasonOf(err); reason != "" {
			s.RefuseExchange(ctx, acc, reason)
		}
		return iam.Issued{}, err
	}
	return tok, nil
}

// RefuseExchange writes the failure audit row of a refused exchange. acc
// carries what is known of the account (possibly only a claimed id).
func (s *Service) RefuseExchange(ctx context.Context, acc ServiceAccount, reason string) {
	if _, err := uuid.Parse(acc.ID); err != nil {
		acc.ID = "" // an unparseable claimed id is not worth recording
	}
	err := s.Store.RecordOutcome(ctx, storage.AuditEvent{Action: "service_account.token", ResourceType: "service_account",
		ResourceID: acc.ID, OrgID: acc.OrgID, ProjectID: acc.ProjectID, Reason: reason}, "failure")
	if err != nil {
		s.Logger.ErrorContext(ctx, "could not audit a refused token exchange", "err", err)
	}
	s.Logger.InfoContext(ctx, "service account token exchange refused", "reason", reason, "service_account_id", acc.ID)
}

// exchange returns what it learnt of the account even on failure, for the
// audit row.
func (s *Service) exchange(ctx context.Context, in ExchangeInput) (ServiceAccount, iam.Issued, error) {
	var acc ServiceAccount
	as, err := ParseAssertion(in.Assertion)
	if err != nil {
		return acc, iam.Issued{}, err
	}
	acc.ID = as.Issuer
	if (in.ServiceAccountID != "" && in.ServiceAccountID != as.Issuer) || (in.KeyID != "" && in.KeyID != as.KeyID) {
		return acc, iam.Issued{}, grantError("hint_mismatch", "service_account_id and key_id, when sent, must equal the assertion's iss and kid")
	}
	now := s.Now()
	if err := as.CheckClaims(now, s.TokenURL(), ClockSkew); err != nil {
		return acc, iam.Issued{}, err
	}
	q := s.Store.Read()
	key, err := q.GetServiceAccountKey(ctx, as.KeyID)
	if errors.Is(err, storage.ErrNotFound) {
		return acc, iam.Issued{}, grantError("unknown_key", "no service-account key has the key_id named in the assertion's kid header; it was deleted with its account or never existed")
	}
	if err != nil {
		return acc, iam.Issued{}, err
	}
	if key.ServiceAccountID != as.Issuer {
		return acc, iam.Issued{}, grantError("key_account_mismatch", "the key named by kid belongs to another service account than the assertion's iss/sub")
	}
	if acc, err = q.GetServiceAccount(ctx, as.Issuer); err != nil {
		acc.ID = as.Issuer
		if errors.Is(err, storage.ErrNotFound) {
			return acc, iam.Issued{}, grantError("unknown_service_account", "the service account named by iss no longer exists")
		}
		return acc, iam.Issued{}, err
	}
	pub, err := publicKeyOf(key.PublicKey)
	if err != nil {
		return acc, iam.Issued{}, err
	}
	if err := as.Verify(key.Algorithm, pub, "key "+as.KeyID); err != nil {
		return acc, iam.Issued{}, err
	}
	if !key.ActiveAt(now) {
		return acc, iam.Issued{}, grantError("key_revoked", "key %s was rotated out or revoked; sign with the account's newest key (rotate-key returns it)", key.ID)
	}
	if acc.Status != AccountActive {
		return acc, iam.Issued{}, grantError("account_disabled", "service account %s is disabled; a project admin can enable it again", acc.ID)
	}
	// Single use: remembered until no replica's expiry check could pass the
	// assertion any more. The primary key refuses a concurrent replay too.
	if err := q.UseAssertionID(ctx, acc.ID, as.JTI, as.RememberUntil(ClockSkew)); err != nil {
		if errors.Is(err, storage.ErrAlreadyExists) {
			return acc, iam.Issued{}, grantError("replayed_assertion", "this assertion's jti was already exchanged; sign a new assertion with a fresh jti for every exchange")
		}
		return acc, iam.Issued{}, err
	}
	s.purgeUsedAssertions(ctx, q)
	// The account and key as read after now are what the token stands on.
	tok, err := s.Tokens.IssueChecked(principal.Principal{Type: principal.ServiceAccount, ID: acc.ID, OrgID: acc.OrgID, ProjectID: acc.ProjectID}, key.ID, now)
	if err != nil {
		return acc, iam.Issued{}, err
	}
	s.Logger.InfoContext(ctx, "service account token issued", "service_account_id", acc.ID, "key_id", key.ID, "expires_in", tok.ExpiresIn)
	return acc, tok, nil
}

// purgeUsedAssertions forgets expired assertion ids, at most once a minute
// per process.
func (s *Service) purgeUsedAssertions(ctx context.Context, q Queries) {
	now := s.Now()
	last := s.lastPurge.Load()
	if now.UnixNano()-last < int64(purgeEvery) || !s.lastPurge.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	if _, err := q.PurgeExpiredAssertionIDs(ctx, now); err != nil {
		s.Logger.WarnContext(ctx, "could not purge used assertion ids", "err", err)
	}
}

// errTokenRevoked is the 401 of a service-account token that no longer
// holds; why (iam.ErrAccountDeleted, …) is its cause.
func errTokenRevoked(why error) error {
	return errdefs.Unauthenticated("invalid_token",
		"this service-account token is no longer valid: the account was disabled or deleted, or its key was revoked; exchange a new assertion").WithCause(why)
}

// CheckServiceAccountToken is consulted on every request carrying a
// service-account token: the account must exist and be enabled, the token
// must postdate the last disable, and its key must not be revoked.
func (s *Service) CheckServiceAccountToken(ctx context.Context, c iam.AccessClaims) (principal.Principal, error) {
	a, k, err := s.Store.Read().ServiceAccountWithKey(ctx, c.Subject, c.KeyID)
	if errors.Is(err, storage.ErrNotFound) {
		return principal.Principal{}, errTokenRevoked(iam.ErrAccountDeleted)
	}
	if err != nil {
		return principal.Principal{}, err
	}
	if a.Status != AccountActive {
		return principal.Principal{}, errTokenRevoked(iam.ErrAccountDisabled)
	}
	if c.CutBy(a.TokensValidAfter) || !k.ActiveAt(s.Now()) {
		return principal.Principal{}, errTokenRevoked(iam.ErrTokenRevoked)
	}
	return principal.Principal{Type: principal.ServiceAccount, ID: a.ID, OrgID: a.OrgID, ProjectID: a.ProjectID}, nil
}
