package manifest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
)

// CanonicalJSON is the stable encoding of a version body: the normalised
// Version with object keys sorted, no insignificant whitespace and no HTML
// escaping. Equal bodies encode to equal bytes whatever spelling, key order
// or YAML/JSON syntax they were submitted in.
func (v Version) CanonicalJSON() ([]byte, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return canonicalJSON(raw)
}

// Digest is "sha256:" and the hex SHA-256 of CanonicalJSON. The server
// compares digests to tell an identical re-submission of a registered
// version (accept, idempotent) from a changed body (refuse: versions are
// immutable once registered).
func (v Version) Digest() (string, error) {
	b, err := v.CanonicalJSON()
	if err != nil {
		return "", err
	}
	return DigestOf(b), nil
}

// DigestOf is "sha256:" and the hex SHA-256 of b: the digest form of
// version bodies and stored app metadata.
func DigestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// canonicalJSON re-encodes JSON through a generic tree: encoding/json
// writes map keys in sorted order, and json.Number keeps numbers exactly as
// they were written rather than rounding through float64.
func canonicalJSON(raw []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var tree any
	if err := dec.Decode(&tree); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("trailing data after JSON value")
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(tree); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
