package signature

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
)

// Algorithm names a signing key algorithm that GenerateKeyPair can create.
type Algorithm string

const (
	// AlgECDSAP256 is ECDSA over NIST P-256 with SHA-256: cosign's default scheme.
	AlgECDSAP256 Algorithm = "ecdsa-p256"
	// AlgEd25519 is pure Ed25519 (the message is signed as is, no pre-hash).
	AlgEd25519 Algorithm = "ed25519"
)

// minRSABits is the smallest RSA modulus accepted for verification.
const minRSABits = 2048

// PublicKey is one registered project signing key.
type PublicKey struct {
	// ID names the key in results and audit (e.g. the publish intent's signing_key_id).
	ID string
	// Key is an *ecdsa.PublicKey (P-256), ed25519.PublicKey or *rsa.PublicKey (>= 2048 bits).
	Key crypto.PublicKey
}

// GenerateKeyPair creates a key pair and returns it PEM-encoded: the private key as
// PKCS#8 ("PRIVATE KEY") and the public key as PKIX ("PUBLIC KEY"), the form
// `cosign verify --key` reads. (cosign's own private key files are scrypt-encrypted;
// `cosign import-key-pair` converts a PKCS#8 key into that form.)
func GenerateKeyPair(alg Algorithm) (privatePEM, publicPEM []byte, err error) {
	var priv crypto.Signer
	switch alg {
	case AlgECDSAP256:
		priv, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case AlgEd25519:
		_, priv, err = ed25519.GenerateKey(rand.Reader)
	default:
		return nil, nil, fmt.Errorf("signature: unsupported key algorithm %q", alg)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("signature: generate %s key: %w", alg, err)
	}
	privDER, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, nil, fmt.Errorf("signature: marshal private key: %w", err)
	}
	publicPEM, err = MarshalPublicKeyPEM(priv.Public())
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: privDER}), publicPEM, nil
}

// MarshalPublicKeyPEM encodes pub as a PKIX "PUBLIC KEY" PEM block, the form
// ParsePublicKeyPEM reads.
func MarshalPublicKeyPEM(pub crypto.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("signature: marshal public key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

// ParsePublicKeyPEM reads the first PEM block of data as a PKIX public key
// ("PUBLIC KEY") and checks it is a supported signing key.
func ParsePublicKeyPEM(data []byte) (crypto.PublicKey, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("signature: no PEM block in public key")
	}
	if block.Type != "PUBLIC KEY" {
		return nil, fmt.Errorf("signature: PEM block is %q, want \"PUBLIC KEY\"", block.Type)
	}
	pub, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("signature: parse public key: %w", err)
	}
	if err := checkPublicKey(pub); err != nil {
		return nil, err
	}
	return pub, nil
}

// ParsePrivateKeyPEM reads an unencrypted PKCS#8 ("PRIVATE KEY"), SEC 1
// ("EC PRIVATE KEY") or PKCS#1 ("RSA PRIVATE KEY") key as a crypto.Signer.
func ParsePrivateKeyPEM(data []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("signature: no PEM block in private key")
	}
	var (
		key any
		err error
	)
	switch block.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("signature: unsupported private key PEM type %q (encrypted keys must be decrypted first)", block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("signature: parse private key: %w", err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("signature: private key type %T cannot sign", key)
	}
	if err := checkPublicKey(signer.Public()); err != nil {
		return nil, err
	}
	return signer, nil
}

// Fingerprint returns "sha256:<hex>" of the key's PKIX DER encoding: a stable
// default key id.
func Fingerprint(pub crypto.PublicKey) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", fmt.Errorf("signature: marshal public key: %w", err)
	}
	sum := sha256.Sum256(der)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

func checkPublicKey(pub crypto.PublicKey) error {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() {
			return fmt.Errorf("signature: unsupported ECDSA curve %s (want P-256)", k.Curve.Params().Name)
		}
	case ed25519.PublicKey:
		if len(k) != ed25519.PublicKeySize {
			return errors.New("signature: malformed Ed25519 public key")
		}
	case *rsa.PublicKey:
		if k.N.BitLen() < minRSABits {
			return fmt.Errorf("signature: RSA key of %d bits is too small (want >= %d)", k.N.BitLen(), minRSABits)
		}
	default:
		return fmt.Errorf("signature: unsupported public key type %T", pub)
	}
	return nil
}

// signMessage signs msg the way cosign (sigstore's LoadSigner with SHA-256) does:
// ECDSA and RSA PKCS#1 v1.5 over SHA-256(msg), Ed25519 over msg itself.
func signMessage(signer crypto.Signer, msg []byte) ([]byte, error) {
	if err := checkPublicKey(signer.Public()); err != nil {
		return nil, err
	}
	if _, ok := signer.Public().(ed25519.PublicKey); ok {
		return signer.Sign(rand.Reader, msg, crypto.Hash(0))
	}
	sum := sha256.Sum256(msg)
	return signer.Sign(rand.Reader, sum[:], crypto.SHA256)
}

// verifyMessage is the inverse of signMessage.
func verifyMessage(pub crypto.PublicKey, msg, sig []byte) bool {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		sum := sha256.Sum256(msg)
		return ecdsa.VerifyASN1(k, sum[:], sig)
	case ed25519.PublicKey:
		return ed25519.Verify(k, msg, sig)
	case *rsa.PublicKey:
		sum := sha256.Sum256(msg)
		return rsa.VerifyPKCS1v15(k, crypto.SHA256, sum[:], sig) == nil
	default:
		return false
	}
}
