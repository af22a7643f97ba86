package serviceaccounts

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"strings"

	"github.com/gpuaas/gpuaas/internal/errdefs"
)

// Key algorithms, named as the JWS "alg" the key signs assertions with.
const (
	AlgEdDSA = "EdDSA" // Ed25519
	AlgES256 = "ES256" // ECDSA P-256 with SHA-256
)

// maxPublicKeyPEM bounds a caller-supplied public key.
const maxPublicKeyPEM = 4 << 10

// normalizeAlg maps accepted spellings to the JWS name; "" is the default.
func normalizeAlg(a string) (string, bool) {
	switch strings.ToLower(strings.TrimSpace(a)) {
	case "", "eddsa", "ed25519":
		return AlgEdDSA, true
	case "es256", "ecdsa-p256", "p-256", "p256":
		return AlgES256, true
	}
	return "", false
}

// generateKey makes a key pair and returns the public and private halves as
// PEM (PKIX "PUBLIC KEY", PKCS#8 "PRIVATE KEY").
func generateKey(alg string) (publicPEM, privatePEM string, err error) {
	var priv crypto.Signer
	switch alg {
	case AlgEdDSA:
		_, priv, err = ed25519.GenerateKey(rand.Reader)
	case AlgES256:
		priv, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	default:
		return "", "", errdefs.Invalid("unsupported_key_algorithm", "key_algorithm must be EdDSA or ES256")
	}
	if err != nil {
		return "", "", err
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return "", "", err
	}
	pub, err := x509.MarshalPKIXPublicKey(priv.Public())
	if err != nil {
		return "", "", err
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})),
		string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})), nil
}

func keyFieldErr(field, code, msg string) error {
	return errdefs.Validation([]errdefs.FieldError{{Field: field, Code: code, Message: msg}})
}

// parsePublicKeyPEM checks a caller-supplied public key and returns its
// algorithm and a canonical PEM. wantAlg, when set, must match the key.
// Nothing of the input is echoed in errors: a confused caller may have
// pasted a private key.
func parsePublicKeyPEM(s, wantAlg string) (alg, canonical string, err error) {
	const field = "/public_key_pem"
	if len(s) > maxPublicKeyPEM {
		return "", "", keyFieldErr(field, "too_large", "a public key PEM is at most 4 KiB")
	}
	if strings.Contains(s, "PRIVATE KEY") {
		return "", "", keyFieldErr(field, "private_key_refused",
			"this is a private key; private keys never travel to the server: send only the public half (openssl pkey -pubout)")
	}
	block, _ := pem.Decode([]byte(s))
	if block == nil || block.Type != "PUBLIC KEY" {
		return "", "", keyFieldErr(field, "invalid_public_key", "must be a PEM block of type PUBLIC KEY (PKIX, SubjectPublicKeyInfo)")
	}
	pub, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return "", "", keyFieldErr(field, "invalid_public_key", "the PEM does not hold a valid PKIX public key")
	}
	alg, ok := publicKeyAlg(pub)
	if !ok {
		return "", "", keyFieldErr(field, "unsupported_key_algorithm", "only Ed25519 (EdDSA) and ECDSA P-256 (ES256) keys are accepted")
	}
	if wantAlg != "" && wantAlg != alg {
		return "", "", keyFieldErr("/key_algorithm", "key_algorithm_mismatch", "key_algorithm says "+wantAlg+" but the public key is "+alg+"; omit key_algorithm or make them agree")
	}
	return alg, string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: block.Bytes})), nil
}

func publicKeyAlg(pub any) (string, bool) {
	switch k := pub.(type) {
	case ed25519.PublicKey:
		return AlgEdDSA, true
	case *ecdsa.PublicKey:
		if k.Curve == elliptic.P256() {
			return AlgES256, true
		}
	}
	return "", false
}

// publicKeyOf parses a stored public key.
func publicKeyOf(pemText string) (any, error) {
	block, _ := pem.Decode([]byte(pemText))
	if block == nil {
		return nil, errdefs.Invalid("invalid_public_key", "stored public key is not PEM")
	}
	return x509.ParsePKIXPublicKey(block.Bytes)
}
