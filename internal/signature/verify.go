// Package signature verifies and writes cosign-compatible, key-based image
// signatures and SLSA provenance attestations stored next to an image in its
// OCI repository.
//
// Layout (sigstore/cosign specs/SIGNATURE_SPEC.md, "tag-based discovery"), for
// an artifact repo@sha256:<hex>:
//
//   - signatures: an OCI image manifest tagged sha256-<hex>.sig in the same
//     repository; each layer has media type
//     application/vnd.dev.cosign.simplesigning.v1+json, its blob is the simple
//     signing payload
//     {"critical":{"identity":{"docker-reference":"<repo>"},"image":{"docker-manifest-digest":"sha256:<hex>"},"type":"cosign container image signature"},"optional":{...}}
//     and its annotation dev.cosignproject.cosign/signature is the base64
//     signature over the payload bytes (ECDSA P-256/SHA-256 ASN.1, Ed25519, or
//     RSA PKCS#1 v1.5/SHA-256).
//   - attestations: an OCI image manifest tagged sha256-<hex>.att; each layer
//     has media type application/vnd.dsse.envelope.v1+json, its blob is a DSSE
//     envelope (payloadType application/vnd.in-toto+json) around an in-toto
//     statement whose subject names sha256:<hex>, and annotations
//     predicateType=<type> and an empty dev.cosignproject.cosign/signature.
//     The DSSE signature is over PAE(payloadType, statement).
//
// Not done: the OCI 1.1 referrers API / sigstore bundle form (cosign v3's
// --new-bundle-format), keyless (Fulcio certificates) and Rekor transparency
// log entries. Signatures written here carry no Rekor bundle, so cosign v2+
// accepts them with `cosign verify --key k.pub --insecure-ignore-tlog=true`
// (and `cosign verify-attestation --type slsaprovenance ... --insecure-ignore-tlog=true`).
package signature

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
)

// maxEnvelopeSignatures bounds the work spent on one DSSE envelope.
const maxEnvelopeSignatures = 16

// Verifier checks signatures and provenance against a fixed set of registered keys.
// It is safe for concurrent use.
type Verifier struct {
	keys []PublicKey
}

// NewVerifier registers keys. IDs must be non-empty and unique; key types must be supported.
func NewVerifier(keys ...PublicKey) (*Verifier, error) {
	if len(keys) == 0 {
		return nil, errors.New("signature: no verification keys")
	}
	seen := make(map[string]bool, len(keys))
	out := make([]PublicKey, 0, len(keys))
	for _, k := range keys {
		if k.ID == "" {
			return nil, errors.New("signature: verification key without an id")
		}
		if seen[k.ID] {
			return nil, fmt.Errorf("signature: duplicate verification key id %q", k.ID)
		}
		seen[k.ID] = true
		if err := checkPublicKey(k.Key); err != nil {
			return nil, fmt.Errorf("signature: key %q: %w", k.ID, err)
		}
		out = append(out, k)
	}
	return &Verifier{keys: out}, nil
}

// KeyIDs lists the registered key ids in registration order.
func (v *Verifier) KeyIDs() []string {
	ids := make([]string, len(v.keys))
	for i, k := range v.keys {
		ids[i] = k.ID
	}
	return ids
}

// verify returns the id of the first registered key that verifies sig over msg.
func (v *Verifier) verify(msg, sig []byte) (string, bool) {
	for _, k := range v.keys {
		if verifyMessage(k.Key, msg, sig) {
			return k.ID, true
		}
	}
	return "", false
}

// Result describes a verified image signature.
type Result struct {
	Ref      string // repo@sha256:<hex> that was verified
	KeyID    string // the registered key that verified it
	Identity string // the docker-reference the payload names
	// SignatureManifest is the digest of the sha256-<hex>.sig manifest that was read.
	SignatureManifest string
}

// VerifyImage checks that the signature manifest of ref holds at least one
// simple signing payload that a registered key signed, that names ref's digest
// and ref's repository (or opts.Identity). A failed check returns an *Error
// with a Reason; registry failures are returned as other errors.
func (v *Verifier) VerifyImage(ctx context.Context, ref RepoDigest, opts Options) (Result, error) {
	tag := ref.SignatureTag()
	img, m, found, err := fetchManifest(ctx, tag, opts)
	if err != nil {
		return Result{}, err
	}
	if !found {
		return Result{}, failure(ReasonSignatureMissing, ref, "no signature manifest at tag %s", tag.TagStr())
	}
	wantIdentity := opts.identity(ref)
	var (
		candidates  int
		digestOther string // a validly signed payload's digest, when it names another one
		identOther  string // a validly signed payload's identity, when it names another one
		problems    []string
	)
	for i, desc := range m.Layers {
		if string(desc.MediaType) != MediaTypeSimpleSigning {
			continue
		}
		if candidates++; candidates > maxLayers {
			problems = append(problems, fmt.Sprintf("only the first %d signatures were checked", maxLayers))
			break
		}
		sig, err := base64.StdEncoding.DecodeString(desc.Annotations[AnnotationSignature])
		if err != nil || len(sig) == 0 {
			problems = append(problems, fmt.Sprintf("layer %d: missing or malformed %s annotation", i, AnnotationSignature))
			continue
		}
		payload, err := readLayer(img, desc, maxPayloadBytes)
		if err != nil {
			if isTransportFailure(err) {
				return Result{}, fmt.Errorf("signature: read %s: %w", tag, err)
			}
			problems = append(problems, fmt.Sprintf("layer %d: %v", i, err))
			continue
		}
		keyID, ok := v.verify(payload, sig)
		if !ok {
			problems = append(problems, fmt.Sprintf("layer %d: no registered key verifies the signature", i))
			continue
		}
		ss, err := ParseSimpleSigning(payload)
		if err != nil {
			problems = append(problems, fmt.Sprintf("layer %d: signed by %q but %v", i, keyID, err))
			continue
		}
		if got := ss.Critical.Image.DockerManifestDigest; got != ref.Digest.String() {
			digestOther = got
			continue
		}
		if got := ss.Critical.Identity.DockerReference; !sameRepository(got, wantIdentity) {
			identOther = got
			continue
		}
		d, err := img.Digest()
		if err != nil {
			return Result{}, fmt.Errorf("signature: digest of %s: %w", tag, err)
		}
		return Result{
			Ref:               ref.String(),
			KeyID:             keyID,
			Identity:          ss.Critical.Identity.DockerReference,
			SignatureManifest: d.String(),
		}, nil
	}
	switch {
	case candidates == 0:
		return Result{}, failure(ReasonSignatureMissing, ref, "signature manifest %s has no %s layer", tag.TagStr(), MediaTypeSimpleSigning)
	case digestOther != "":
		return Result{}, failure(ReasonDigestMismatch, ref, "signed payload names digest %q", digestOther)
	case identOther != "":
		return Result{}, failure(ReasonIdentityMismatch, ref, "signed payload names repository %q, want %q", identOther, wantIdentity)
	default:
		return Result{}, failure(ReasonSignatureInvalid, ref, "none of %d signature(s) verifies with keys [%s]: %s",
			candidates, strings.Join(v.KeyIDs(), ", "), strings.Join(problems, "; "))
	}
}

// sameRepository compares a payload's docker-reference with the expected
// repository after normalisation (index.docker.io/library/..., tags and
// digests stripped: a simple signing identity may carry either).
func sameRepository(got, want string) bool {
	if got == want {
		return true
	}
	g, err := repositoryName(got)
	if err != nil {
		return false
	}
	w, err := repositoryName(want)
	if err != nil {
		return false
	}
	return g == w
}

func repositoryName(s string) (string, error) {
	if ref, err := name.ParseReference(s, name.StrictValidation); err == nil {
		return ref.Context().Name(), nil
	}
	repo, err := name.NewRepository(s, name.StrictValidation)
	if err != nil {
		return "", err
	}
	return repo.Name(), nil
}

// ProvenanceResult describes verified SLSA provenance.
type ProvenanceResult struct {
	Ref           string // repo@sha256:<hex> the statement is about
	KeyID         string // the registered key that verified the DSSE envelope
	StatementType string // in-toto _type
	PredicateType string // SLSA provenance v0.2 or v1
	Predicate     json.RawMessage
	// AttestationManifest is the digest of the sha256-<hex>.att manifest that was read.
	AttestationManifest string
}

// VerifyProvenance checks that the attestation manifest of ref holds a DSSE
// envelope signed by a registered key whose in-toto statement is SLSA
// provenance (v0.2 or v1) with a subject of ref's digest. Attestations of
// other predicate types are ignored.
func (v *Verifier) VerifyProvenance(ctx context.Context, ref RepoDigest, opts Options) (ProvenanceResult, error) {
	tag := ref.AttestationTag()
	img, m, found, err := fetchManifest(ctx, tag, opts)
	if err != nil {
		return ProvenanceResult{}, err
	}
	if !found {
		return ProvenanceResult{}, failure(ReasonProvenanceMissing, ref, "no attestation manifest at tag %s", tag.TagStr())
	}
	var (
		candidates     int
		subjectOther   []string
		problems       []string
		otherPredicate int
	)
	for i, desc := range m.Layers {
		if string(desc.MediaType) != MediaTypeDSSE {
			continue
		}
		if candidates++; candidates > maxLayers {
			problems = append(problems, fmt.Sprintf("only the first %d attestations were checked", maxLayers))
			break
		}
		raw, err := readLayer(img, desc, maxEnvelopeBytes)
		if err != nil {
			if isTransportFailure(err) {
				return ProvenanceResult{}, fmt.Errorf("signature: read %s: %w", tag, err)
			}
			problems = append(problems, fmt.Sprintf("layer %d: %v", i, err))
			continue
		}
		env, statement, err := parseEnvelope(raw)
		if err != nil {
			problems = append(problems, fmt.Sprintf("layer %d: %v", i, err))
			continue
		}
		keyID, ok := v.verifyEnvelope(env, statement)
		if !ok {
			problems = append(problems, fmt.Sprintf("layer %d: no registered key verifies the DSSE envelope", i))
			continue
		}
		st, err := ParseStatement(statement)
		if err != nil {
			problems = append(problems, fmt.Sprintf("layer %d: signed by %q but %v", i, keyID, err))
			continue
		}
		if !isProvenance(st.PredicateType) {
			otherPredicate++
			continue
		}
		if !st.hasSubjectDigest(ref.Digest.Hex) {
			for _, s := range st.Subject {
				subjectOther = append(subjectOther, "sha256:"+s.Digest["sha256"])
			}
			continue
		}
		d, err := img.Digest()
		if err != nil {
			return ProvenanceResult{}, fmt.Errorf("signature: digest of %s: %w", tag, err)
		}
		return ProvenanceResult{
			Ref:                 ref.String(),
			KeyID:               keyID,
			StatementType:       st.Type,
			PredicateType:       st.PredicateType,
			Predicate:           st.Predicate,
			AttestationManifest: d.String(),
		}, nil
	}
	switch {
	case len(subjectOther) > 0:
		return ProvenanceResult{}, failure(ReasonProvenanceSubjectMismatch, ref, "signed provenance is about [%s]", strings.Join(subjectOther, ", "))
	case len(problems) > 0:
		return ProvenanceResult{}, failure(ReasonProvenanceInvalid, ref, "none of %d attestation(s) verifies with keys [%s]: %s",
			candidates, strings.Join(v.KeyIDs(), ", "), strings.Join(problems, "; "))
	default:
		return ProvenanceResult{}, failure(ReasonProvenanceMissing, ref, "attestation manifest %s has no SLSA provenance (%d attestation(s) of other predicate types)", tag.TagStr(), otherPredicate)
	}
}

// verifyEnvelope returns the id of a registered key that verifies any of the
// envelope's signatures over PAE(payloadType, payload).
func (v *Verifier) verifyEnvelope(env Envelope, payload []byte) (string, bool) {
	msg := pae(env.PayloadType, payload)
	for i, s := range env.Signatures {
		if i >= maxEnvelopeSignatures {
			break
		}
		sig, err := base64.StdEncoding.DecodeString(s.Sig)
		if err != nil || len(sig) == 0 {
			continue
		}
		if id, ok := v.verify(msg, sig); ok {
			return id, true
		}
	}
	return "", false
}
