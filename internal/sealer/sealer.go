// Package sealer encrypts secrets at rest (signing keys, wrapped credentials)
// with AES-256-GCM under the deployment's master key. The interface leaves
// room for a KMS or Vault transit backend.
package sealer

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/gpuaas/gpuaas/internal/fsutil"
)

// KeySize is the master key length in bytes.
const KeySize = 32

const prefix = "v1:"

// Sealer seals and opens small secrets.
type Sealer struct{ aead cipher.AEAD }

// New builds a sealer from a 32-byte master key.
func New(key []byte) (*Sealer, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("sealer: master key must be %d bytes, got %d", KeySize, len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Sealer{aead: aead}, nil
}

// Seal encrypts plaintext; aad binds the ciphertext to its purpose (e.g. a
// key id) so a sealed value cannot be moved to another row.
func (s *Sealer) Seal(plaintext []byte, aad string) (string, error) {
	nonce := make([]byte, s.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	ct := s.aead.Seal(nonce, nonce, plaintext, []byte(aad))
	return prefix + base64.RawStdEncoding.EncodeToString(ct), nil
}

// Open decrypts a value produced by Seal with the same aad.
func (s *Sealer) Open(sealed, aad string) ([]byte, error) {
	if !strings.HasPrefix(sealed, prefix) {
		return nil, errors.New("sealer: unknown format")
	}
	raw, err := base64.RawStdEncoding.DecodeString(sealed[len(prefix):])
	if err != nil {
		return nil, fmt.Errorf("sealer: %w", err)
	}
	n := s.aead.NonceSize()
	if len(raw) < n {
		return nil, errors.New("sealer: value too short")
	}
	pt, err := s.aead.Open(nil, raw[:n], raw[n:], []byte(aad))
	if err != nil {
		return nil, errors.New("sealer: cannot open value (wrong master key or tampered)")
	}
	return pt, nil
}

// LoadOrCreateKeyFile reads a base64 master key from path, creating one with
// mode 0600 when the file does not exist (dev mode).
func LoadOrCreateKeyFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return createKeyFile(path)
	}
	if err != nil {
		return nil, err
	}
	return DecodeKey(strings.TrimSpace(string(b)))
}

// createKeyFile writes a new key aside, syncs it and links it in
// (fsutil.CreateFile): the link fails when the file exists, so of two
// processes starting together one key wins and the other reads it back (a
// key that is not on disk would seal secrets no later start can open), and a
// crash never leaves a torn file.
func createKeyFile(path string) ([]byte, error) {
	key := make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	err := fsutil.CreateFile(path, []byte(base64.StdEncoding.EncodeToString(key)+"\n"), 0o600)
	if errors.Is(err, os.ErrExist) {
		return ReadKeyFile(path)
	} else if err != nil {
		return nil, err
	}
	return key, nil
}

// DecodeKey parses a base64 master key.
func DecodeKey(s string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("master key is not base64: %w", err)
	}
	if len(key) != KeySize {
		return nil, fmt.Errorf("master key must decode to %d bytes, got %d", KeySize, len(key))
	}
	return key, nil
}

// ReadKeyFile reads a base64 master key from path, failing when the file is
// missing.
func ReadKeyFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read master key file: %w", err)
	}
	return DecodeKey(strings.TrimSpace(string(b)))
}
