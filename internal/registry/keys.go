package registry

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/gpuaas/gpuaas/internal/signature"
)

// KeyAlgorithm names a token signing algorithm (JWS "alg").
type KeyAlgorithm string

// Supported signing algorithms.
const (
	EdDSA KeyAlgorithm = "EdDSA" // Ed25519
	ES256 KeyAlgorithm = "ES256" // ECDSA P-256 with SHA-256
)

// SigningKey is a private token signing key with its key id (the RFC 7638
// JWK thumbprint of its public half).
type SigningKey struct {
	signer crypto.Signer
	alg    KeyAlgorithm
	kid    string
}

// GenerateSigningKey creates a fresh key for alg (EdDSA or ES256).
func GenerateSigningKey(alg KeyAlgorithm) (*SigningKey, error) {
	switch alg {
	case EdDSA:
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return nil, err
		}
		return newSigningKey(priv)
	case ES256:
		priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, err
		}
		return newSigningKey(priv)
	default:
		return nil, invalidf("invalid_signing_key", "unsupported signing algorithm %q", alg)
	}
}

// ParseSigningKeyPEM reads a PKCS#8 "PRIVATE KEY" (Ed25519 or ECDSA P-256)
// or SEC 1 "EC PRIVATE KEY" (P-256) PEM block. The PEM decoding is
// signature.ParsePrivateKeyPEM's; token keys are further limited to the two
// JWS algorithms the registry accepts.
func ParseSigningKeyPEM(data []byte) (*SigningKey, error) {
	signer, err := signature.ParsePrivateKeyPEM(data)
	if err != nil {
		return nil, invalidf("invalid_signing_key", "%v", err)
	}
	return newSigningKey(signer)
}

// LoadOrCreateSigningKey reads the PEM key at path, or generates an Ed25519
// key and writes it there (mode 0600) when the file does not exist.
func LoadOrCreateSigningKey(path string) (*SigningKey, error) {
	data, err := os.ReadFile(path)
	if err == nil {
		return ParseSigningKeyPEM(data)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	key, err := GenerateSigningKey(EdDSA)
	if err != nil {
		return nil, err
	}
	pemBytes, err := key.MarshalPEM()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		if errors.Is(err, fs.ErrExist) { // lost a race with another process: use its key
			return LoadOrCreateSigningKey(path)
		}
		return nil, err
	}
	if _, err := f.Write(pemBytes); err != nil {
		f.Close()
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	return key, nil
}

func newSigningKey(signer crypto.Signer) (*SigningKey, error) {
	var alg KeyAlgorithm
	switch k := signer.(type) {
	case ed25519.PrivateKey:
		alg = EdDSA
	case *ecdsa.PrivateKey:
		if k.Curve != elliptic.P256() {
			return nil, invalidf("invalid_signing_key", "only the P-256 curve is supported")
		}
		alg = ES256
	default:
		return nil, invalidf("invalid_signing_key", "signing key type %T is not supported (want Ed25519 or ECDSA P-256)", signer)
	}
	kid, err := KeyID(signer.Public())
	if err != nil {
		return nil, err
	}
	return &SigningKey{signer: signer, alg: alg, kid: kid}, nil
}

// KeyID returns the "kid" of the key.
func (k *SigningKey) KeyID() string { return k.kid }

// Algorithm returns the JWS algorithm the key signs with.
func (k *SigningKey) Algorithm() KeyAlgorithm { return k.alg }

// Public returns the public half.
func (k *SigningKey) Public() crypto.PublicKey { return k.signer.Public() }

// MarshalPEM encodes the private key as a PKCS#8 "PRIVATE KEY" PEM block.
// The result is secret: never log it.
func (k *SigningKey) MarshalPEM() ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k.signer)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// LogValue keeps the private key out of logs.
func (k *SigningKey) LogValue() slog.Value {
	return slog.GroupValue(slog.String("kid", k.kid), slog.String("alg", string(k.alg)))
}

// String keeps the private key out of fmt output.
func (k *SigningKey) String() string { return fmt.Sprintf("SigningKey(%s %s)", k.alg, k.kid) }

// ParsePublicKeyPEM reads a PKIX "PUBLIC KEY" PEM block (Ed25519 or ECDSA
// P-256), e.g. a retired signing key kept for verification. The PEM decoding
// is signature.ParsePublicKeyPEM's.
func ParsePublicKeyPEM(data []byte) (crypto.PublicKey, error) {
	pub, err := signature.ParsePublicKeyPEM(data)
	if err != nil {
		return nil, invalidf("invalid_signing_key", "%v", err)
	}
	if _, err := publicJWK(pub); err != nil {
		return nil, err
	}
	return pub, nil
}

// KeySet is the signing key plus any verification-only (retired) public
// keys. The embedded registry trusts every key in the set.
type KeySet struct {
	signing *SigningKey
	keys    []jwk // signing key first
}

// NewKeySet builds a key set. retired are public keys of previous signing
// keys, still trusted until the tokens they signed have expired or the key
// is retired.
func NewKeySet(signing *SigningKey, retired ...crypto.PublicKey) (*KeySet, error) {
	if signing == nil {
		return nil, invalidf("invalid_signing_key", "key set needs a signing key")
	}
	own, err := publicJWK(signing.Public())
	if err != nil {
		return nil, err
	}
	ks := &KeySet{signing: signing, keys: []jwk{own}}
	seen := map[string]bool{own.Kid: true}
	for _, pub := range retired {
		j, err := publicJWK(pub)
		if err != nil {
			return nil, err
		}
		if !seen[j.Kid] {
			seen[j.Kid] = true
			ks.keys = append(ks.keys, j)
		}
	}
	return ks, nil
}

// Signing returns the current signing key.
func (ks *KeySet) Signing() *SigningKey { return ks.signing }

// KeyIDs lists the ids of every trusted key, signing key first.
func (ks *KeySet) KeyIDs() []string {
	ids := make([]string, len(ks.keys))
	for i, k := range ks.keys {
		ids[i] = k.Kid
	}
	return ids
}

// JWKS returns the public keys as a JSON Web Key Set, the form the
// distribution registry's "auth.token.jwks" option reads.
func (ks *KeySet) JWKS() ([]byte, error) {
	return json.MarshalIndent(struct {
		Keys []jwk `json:"keys"`
	}{ks.keys}, "", "  ")
}

// jwk is a public JSON Web Key (RFC 7517) for OKP/Ed25519 or EC/P-256.
type jwk struct {
	Kty string `json:"kty"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Y   string `json:"y,omitempty"`
	Kid string `json:"kid"`
	Alg string `json:"alg"`
	Use string `json:"use"`
}

var b64 = base64.RawURLEncoding

func publicJWK(pub crypto.PublicKey) (jwk, error) {
	switch k := pub.(type) {
	case ed25519.PublicKey:
		j := jwk{Kty: "OKP", Crv: "Ed25519", X: b64.EncodeToString(k), Alg: string(EdDSA), Use: "sig"}
		j.Kid = thumbprint(fmt.Sprintf(`{"crv":"Ed25519","kty":"OKP","x":%q}`, j.X))
		return j, nil
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() {
			return jwk{}, invalidf("invalid_signing_key", "only the P-256 curve is supported")
		}
		ek, err := k.ECDH()
		if err != nil {
			return jwk{}, invalidf("invalid_signing_key", "%v", err)
		}
		raw := ek.Bytes() // 0x04 || X || Y, 32 bytes each
		j := jwk{Kty: "EC", Crv: "P-256", X: b64.EncodeToString(raw[1:33]), Y: b64.EncodeToString(raw[33:65]), Alg: string(ES256), Use: "sig"}
		j.Kid = thumbprint(fmt.Sprintf(`{"crv":"P-256","kty":"EC","x":%q,"y":%q}`, j.X, j.Y))
		return j, nil
	default:
		return jwk{}, invalidf("invalid_signing_key", "public key type %T is not supported (want Ed25519 or ECDSA P-256)", pub)
	}
}

// KeyID returns the RFC 7638 thumbprint of an Ed25519 or ECDSA P-256 public key.
func KeyID(pub crypto.PublicKey) (string, error) {
	j, err := publicJWK(pub)
	if err != nil {
		return "", err
	}
	return j.Kid, nil
}

func thumbprint(canonical string) string {
	sum := sha256.Sum256([]byte(canonical))
	return b64.EncodeToString(sum[:])
}
