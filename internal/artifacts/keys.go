package artifacts

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"errors"
	"strings"

	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/signature"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// SigningKeyInput registers a project signing public key.
type SigningKeyInput struct {
	Name      string `json:"name"`
	PublicKey string `json:"public_key"`
}

// CreateSigningKey registers a PEM public key (ECDSA P-256, Ed25519 or
// RSA >= 2048) that artifact signatures of the project are verified against.
func (s *Service) CreateSigningKey(ctx context.Context, g *iam.Grants, projectID string, in SigningKeyInput) (ArtifactSigningKey, error) {
	p, err := s.IAM.Project(ctx, g, projectID, iam.PermSigningKeysWrite)
	if err != nil {
		return ArtifactSigningKey{}, err
	}
	var fe []errdefs.FieldError
	in.Name = strings.TrimSpace(in.Name)
	if in.Name == "" || len(in.Name) > 128 {
		fe = append(fe, errdefs.FieldError{Field: "/name", Code: "required", Message: "name the key (1..128 characters), e.g. ci-release"})
	}
	pub, perr := signature.ParsePublicKeyPEM([]byte(in.PublicKey))
	if perr != nil || len(in.PublicKey) > 16<<10 {
		fe = append(fe, errdefs.FieldError{Field: "/public_key", Code: "invalid",
			Message: "must be a PEM \"PUBLIC KEY\" (ECDSA P-256, Ed25519 or RSA >= 2048), e.g. cosign.pub"})
	}
	if fe != nil {
		return ArtifactSigningKey{}, errdefs.Validation(fe)
	}
	fp, err := signature.Fingerprint(pub)
	if err != nil {
		return ArtifactSigningKey{}, err
	}
	pemText, err := signature.MarshalPublicKeyPEM(pub)
	if err != nil {
		return ArtifactSigningKey{}, err
	}
	k := ArtifactSigningKey{ID: iam.NewID(), OrgID: p.OrgID, ProjectID: p.ID, Name: in.Name, Algorithm: keyAlgorithm(pub),
		PublicKey: string(pemText), Fingerprint: fp, CreatedBy: actor(ctx), CreatedAt: s.Now()}
	err = s.Store.Mutate(ctx, func(tx Tx) error {
		if err := tx.InsertArtifactSigningKey(ctx, k); err != nil {
			if errors.Is(err, storage.ErrAlreadyExists) {
				return errdefs.AlreadyExists("signing_key_exists", "the project already has this key or a key named %q", k.Name)
			}
			return err
		}
		return tx.Audit(storage.AuditEvent{Action: "artifact.signing_key.create", ResourceType: "artifact_signing_key", ResourceID: k.ID,
			OrgID: k.OrgID, ProjectID: k.ProjectID}, nil, map[string]any{"name": k.Name, "algorithm": k.Algorithm, "fingerprint": k.Fingerprint})
	})
	if err != nil {
		return ArtifactSigningKey{}, err
	}
	return k, nil
}

// ListSigningKeys lists a project's signing keys.
func (s *Service) ListSigningKeys(ctx context.Context, g *iam.Grants, projectID string, pg storage.Page) ([]ArtifactSigningKey, string, error) {
	p, err := s.IAM.Project(ctx, g, projectID, iam.PermArtifactRead)
	if err != nil {
		return nil, "", err
	}
	return s.Store.Read().ListArtifactSigningKeys(ctx, p.ID, pg)
}

func keyAlgorithm(pub any) string {
	switch pub.(type) {
	case *ecdsa.PublicKey:
		return string(signature.AlgECDSAP256)
	case ed25519.PublicKey:
		return string(signature.AlgEd25519)
	case *rsa.PublicKey:
		return "rsa"
	}
	return "unknown"
}
