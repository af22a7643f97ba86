package releases

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpuaas/gpuaas/internal/clock"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/sealer"
	"github.com/gpuaas/gpuaas/internal/signature"
)

// KeyPurpose is the signing_keys purpose of the release signing key.
const KeyPurpose = "release_signing"

// SigningKey is the platform's ECDSA P-256 release signing key.
type SigningKey struct {
	KID       string
	signer    crypto.Signer
	publicPEM []byte
}

// PublicPEM is the PKIX PEM of the public key (cosign verify-blob --key).
func (k *SigningKey) PublicPEM() []byte { return k.publicPEM }

// Sign returns the base64 of the ASN.1 DER ECDSA-SHA256 signature of b,
// the form `cosign verify-blob --signature` reads.
func (k *SigningKey) Sign(b []byte) (string, error) {
	sum := sha256.Sum256(b)
	sig, err := k.signer.Sign(rand.Reader, sum[:], crypto.SHA256)
	if err != nil {
		return "", fmt.Errorf("sign release manifest: %w", err)
	}
	return base64.StdEncoding.EncodeToString(sig), nil
}

// LoadSigningKey returns the release signing key every replica shares: it
// lives in signing_keys with its private half sealed under the master key;
// the first start creates it, and replicas starting together store one
// between them (InsertFirstSigningKey).
func LoadSigningKey(ctx context.Context, db iam.KeyStore, s *sealer.Sealer, now func() time.Time) (*SigningKey, error) {
	rows, err := db.SigningKeys(ctx, KeyPurpose)
	if err != nil {
		return nil, fmt.Errorf("load release signing key: %w", err)
	}
	if !slices.ContainsFunc(rows, func(k iam.SigningKey) bool { return k.RetiredAt.IsZero() }) {
		privPEM, pubPEM, err := signature.GenerateKeyPair(signature.AlgECDSAP256)
		if err != nil {
			return nil, err
		}
		pub, err := signature.ParsePublicKeyPEM(pubPEM)
		if err != nil {
			return nil, err
		}
		fp, err := signature.Fingerprint(pub)
		if err != nil {
			return nil, err
		}
		kid := "release-" + strings.TrimPrefix(fp, "sha256:")[:16]
		sealed, err := iam.SealSigningKey(s, KeyPurpose, kid, privPEM)
		if err != nil {
			return nil, err
		}
		if _, err := db.InsertFirstSigningKey(ctx, iam.SigningKey{KID: kid, Purpose: KeyPurpose, Algorithm: string(signature.AlgECDSAP256),
			PrivateKey: sealed, PublicKey: string(pubPEM), CreatedAt: clock.Or(now)()}); err != nil {
			return nil, fmt.Errorf("store release signing key: %w", err)
		}
		if rows, err = db.SigningKeys(ctx, KeyPurpose); err != nil {
			return nil, err
		}
	}
	if err := iam.ResealSigningKeys(ctx, db, s, KeyPurpose, rows, now); err != nil {
		return nil, fmt.Errorf("release signing keys: %w", err)
	}
	for _, r := range rows {
		if !r.RetiredAt.IsZero() {
			continue
		}
		raw, err := iam.OpenSigningKey(s, KeyPurpose, r)
		if err != nil {
			return nil, fmt.Errorf("release signing key: %w", err)
		}
		signer, err := signature.ParsePrivateKeyPEM(raw)
		if err != nil {
			return nil, fmt.Errorf("release signing key %s: %w", r.KID, err)
		}
		return &SigningKey{KID: r.KID, signer: signer, publicPEM: []byte(r.PublicKey)}, nil
	}
	return nil, fmt.Errorf("no release signing key")
}
