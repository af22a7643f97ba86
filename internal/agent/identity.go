package agent

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
	"github.com/gpuaas/gpuaas/client"
	"github.com/gpuaas/gpuaas/internal/fsutil"
)

// identity is what the agent keeps across restarts: its key pair and the
// node it became when it joined. It never joins twice.
type identity struct {
	NodeID   string `json:"node_id"`
	KeyID    string `json:"key_id"`
	TokenURL string `json:"token_url"`
	Server   string `json:"server"`
	priv     ed25519.PrivateKey
}

const (
	keyFile      = "node.key"
	identityFile = "node.json"
)

// loadOrCreateKey reads the node key, or generates one (mode 0600) on first start.
func loadOrCreateKey(dir string) (ed25519.PrivateKey, string, error) {
	path := filepath.Join(dir, keyFile)
	b, err := os.ReadFile(path)
	var priv ed25519.PrivateKey
	switch {
	case err == nil:
		blk, _ := pem.Decode(b)
		if blk == nil {
			return nil, "", fmt.Errorf("%s holds no PEM key", path)
		}
		k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w", path, err)
		}
		var ok bool
		if priv, ok = k.(ed25519.PrivateKey); !ok {
			return nil, "", fmt.Errorf("%s is not an Ed25519 key", path)
		}
	case errors.Is(err, os.ErrNotExist):
		_, priv, err = ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return nil, "", err
		}
		der, err := x509.MarshalPKCS8PrivateKey(priv)
		if err != nil {
			return nil, "", err
		}
		if err := writeFileAtomic(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})); err != nil {
			return nil, "", err
		}
	default:
		return nil, "", err
	}
	der, err := x509.MarshalPKIXPublicKey(priv.Public())
	if err != nil {
		return nil, "", err
	}
	return priv, string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})), nil
}

// writeFileAtomic replaces path (mode 0600) so that a crash or a power loss
// leaves the old content or the new, never an empty node.key or node.json
// (either bricks the agent until it joins again): fsutil.WriteFile syncs the
// file before the rename and the directory after it.
func writeFileAtomic(path string, b []byte) error {
	return fsutil.WriteFile(path, b, 0o600)
}

func loadIdentity(dir string) (identity, bool, error) {
	var id identity
	b, err := os.ReadFile(filepath.Join(dir, identityFile))
	if errors.Is(err, os.ErrNotExist) {
		return id, false, nil
	}
	if err != nil {
		return id, false, err
	}
	if err := json.Unmarshal(b, &id); err != nil || id.NodeID == "" {
		return id, false, fmt.Errorf("%s is damaged; remove the data dir and join again with a new join token", filepath.Join(dir, identityFile))
	}
	return id, true, nil
}

func saveIdentity(dir string, id identity) error {
	b, err := json.MarshalIndent(id, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(dir, identityFile), append(b, '\n'))
}

// assertionLifetime bounds a node assertion well under the server's limit.
const assertionLifetime = 2 * time.Minute

// tokens mints node access tokens from node-signed assertions and keeps
// one until shortly before it expires.
type tokens struct {
	api *client.Client // no token: the exchange is authenticated by the assertion
	id  *identity

	mu     sync.Mutex
	token  string
	expiry time.Time
}

func (t *tokens) assertion() (string, error) {
	now := time.Now()
	tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.RegisteredClaims{
		Issuer: t.id.NodeID, Subject: t.id.NodeID, Audience: jwt.ClaimStrings{t.id.TokenURL},
		IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(assertionLifetime)), ID: uuid.NewString()})
	tok.Header["kid"] = t.id.KeyID
	return tok.SignedString(t.id.priv)
}

// Get returns a valid node access token, refreshing it when less than a
// quarter of its life (at least 10s) is left.
func (t *tokens) Get(ctx context.Context) (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.token != "" && time.Until(t.expiry) > 10*time.Second {
		return t.token, nil
	}
	a, err := t.assertion()
	if err != nil {
		return "", err
	}
	r, err := t.api.NodeToken(ctx, a)
	if err != nil {
		return "", err
	}
	life := time.Duration(r.ExpiresIn) * time.Second
	t.token, t.expiry = r.AccessToken, time.Now().Add(life-life/4)
	return t.token, nil
}

// Drop forgets the token (after the server refused it).
func (t *tokens) Drop() {
	t.mu.Lock()
	t.token = ""
	t.mu.Unlock()
}
