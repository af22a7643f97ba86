package agent

import (
	"bytes"
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
	"regexp"
	"strings"
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

// damagedIdentity is a node.json that names no node: empty, cut short or
// not JSON (older agents did not write it durably, so a crash or a power
// loss could leave it so). partial is what could still be read from it.
type damagedIdentity struct {
	path    string
	what    string
	partial identity
}

func (e *damagedIdentity) Error() string { return e.path + " " + e.what }

// fieldRE finds a complete "name": "value" pair in what is left of a
// node.json cut short.
var fieldRE = regexp.MustCompile(`"(node_id|key_id|token_url|server)"\s*:\s*"([^"\\]*)"`)

// loadIdentity reads node.json; ok is false when there is none. A damaged
// one is a *damagedIdentity carrying the fields still readable.
func loadIdentity(dir string) (identity, bool, error) {
	var id identity
	path := filepath.Join(dir, identityFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return id, false, nil
	}
	if err != nil {
		return id, false, err
	}
	switch err := json.Unmarshal(b, &id); {
	case len(bytes.TrimSpace(b)) == 0:
		return identity{}, false, &damagedIdentity{path: path, what: fmt.Sprintf("is empty (%d bytes)", len(b))}
	case err != nil:
		var part identity
		for _, m := range fieldRE.FindAllSubmatch(b, -1) {
			v := string(m[2])
			switch string(m[1]) {
			case "node_id":
				part.NodeID = v
			case "key_id":
				part.KeyID = v
			case "token_url":
				part.TokenURL = v
			case "server":
				part.Server = v
			}
		}
		return identity{}, false, &damagedIdentity{path: path, what: fmt.Sprintf("is cut short or not JSON (%d bytes: %v)", len(b), err), partial: part}
	case id.NodeID == "":
		return identity{}, false, &damagedIdentity{path: path, what: "names no node (no node_id)", partial: id}
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

// recoverIdentity deals with a damaged node.json. When what is left of it
// still names the node and the control plane accepts an assertion signed
// with node.key for that node, the identity is rebuilt and saved: the node
// key is what proves the node, node.json only names it. Otherwise, given a
// join token, ok is false and the agent joins again with its key (the same
// token, not yet expired, gets the same node back). Without one, the error
// says what is wrong and how to fix it.
func (a *Agent) recoverIdentity(ctx context.Context, d *damagedIdentity, priv ed25519.PrivateKey) (identity, bool, error) {
	if id := d.partial; id.NodeID != "" {
		if id.TokenURL == "" {
			id.TokenURL = strings.TrimRight(a.cfg.Server, "/") + "/api/v1/nodes/token"
		}
		id.Server, id.priv = a.cfg.Server, priv
		api := client.New(a.cfg.Server, "")
		api.HTTP.Transport = a.conns
		_, err := (&tokens{api: api, id: &id}).Get(ctx)
		if err == nil {
			if err := saveIdentity(a.cfg.DataDir, id); err != nil {
				return identity{}, false, fmt.Errorf("%v; the control plane confirmed node.key is node %s, but the repaired file could not be saved: %w", d, id.NodeID, err)
			}
			a.log.WarnContext(ctx, "node identity file was damaged; the control plane confirmed the node key's node and the file was written again", "path", d.path, "node_id", id.NodeID)
			return id, true, nil
		}
		a.log.WarnContext(ctx, "node identity file is damaged and the control plane did not confirm the node it still names", "path", d.path, "node_id", id.NodeID, "err", err)
		if a.cfg.JoinToken == "" {
			if refusedGrant(err) {
				return identity{}, false, fmt.Errorf("%v: it still names node %s, but the control plane at %s refused node.key for that node (%v).\n%s",
					d, id.NodeID, a.cfg.Server, err, identityFix(d, a.cfg.DataDir))
			}
			return identity{}, false, fmt.Errorf("%v: it still names node %s, but the control plane at %s could not confirm it (%v); start the agent again once the control plane answers.\n%s",
				d, id.NodeID, a.cfg.Server, err, identityFix(d, a.cfg.DataDir))
		}
	}
	if a.cfg.JoinToken != "" {
		a.log.WarnContext(ctx, "node identity file is damaged; joining again with the join token and the node's key", "path", d.path, "problem", d.what)
		return identity{}, false, nil
	}
	return identity{}, false, fmt.Errorf("%v, so the agent does not know which node it is.\n%s", d, identityFix(d, a.cfg.DataDir))
}

// refusedGrant reports whether the control plane answered a token exchange
// with a refusal (4xx): the node is unknown, removed, or the key is not its.
func refusedGrant(err error) bool {
	var ae *client.APIError
	return errors.As(err, &ae) && ae.Status >= 400 && ae.Status < 500
}

// identityFix is the operator's way out of a damaged node.json.
func identityFix(d *damagedIdentity, dir string) string {
	return fmt.Sprintf(`To fix it, create a join token (gpuaas node join-token) and either:
  - start the agent once with --join-token <token>: it joins again with its node key (%s) and writes %s anew; or
  - remove %s and %s, then start the agent with --join-token <token> to join as a new node with a new key.
If the control plane still lists the old node, remove it (gpuaas node remove <node id>).`,
		filepath.Join(dir, keyFile), d.path, d.path, filepath.Join(dir, keyFile))
}
