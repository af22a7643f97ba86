package signature

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// Media types, annotation keys and type URIs of the cosign registry layout
// (sigstore/cosign specs/SIGNATURE_SPEC.md, in-toto attestation spec v1, DSSE v1).
const (
	// MediaTypeSimpleSigning is the layer media type of a cosign signature payload.
	MediaTypeSimpleSigning = "application/vnd.dev.cosign.simplesigning.v1+json"
	// MediaTypeDSSE is the layer media type of a cosign attestation (a DSSE envelope).
	MediaTypeDSSE = "application/vnd.dsse.envelope.v1+json"
	// AnnotationSignature carries the base64 signature over the layer's payload.
	AnnotationSignature = "dev.cosignproject.cosign/signature"
	// AnnotationPredicateType is cosign's (unsigned) hint of an attestation's predicate type.
	AnnotationPredicateType = "predicateType"

	// SimpleSigningType is critical.type of a cosign image signature.
	SimpleSigningType = "cosign container image signature"

	// PayloadTypeInToto is the DSSE payloadType of an in-toto statement.
	PayloadTypeInToto = "application/vnd.in-toto+json"
	// StatementTypeV01 and StatementTypeV1 are the accepted in-toto statement _type values.
	StatementTypeV01 = "https://in-toto.io/Statement/v0.1"
	StatementTypeV1  = "https://in-toto.io/Statement/v1"
	// PredicateSLSAProvenanceV02 and PredicateSLSAProvenanceV1 are the accepted provenance predicates.
	PredicateSLSAProvenanceV02 = "https://slsa.dev/provenance/v0.2"
	PredicateSLSAProvenanceV1  = "https://slsa.dev/provenance/v1"
)

// Size limits for untrusted documents read from the registry.
const (
	maxPayloadBytes  = 1 << 20 // simple signing payload
	maxEnvelopeBytes = 8 << 20 // DSSE envelope with its provenance statement
	maxLayers        = 128     // signature/attestation layers looked at per manifest
)

// SimpleSigning is the signed payload of a cosign image signature (the "simple
// signing" JSON format of containers/image, with cosign's critical.type).
type SimpleSigning struct {
	Critical Critical       `json:"critical"`
	Optional map[string]any `json:"optional"`
}

// Critical holds the claims a verifier must check.
type Critical struct {
	Identity Identity `json:"identity"`
	Image    Image    `json:"image"`
	Type     string   `json:"type"`
}

// Identity names the repository the signature was made for.
type Identity struct {
	DockerReference string `json:"docker-reference"`
}

// Image names the signed manifest digest.
type Image struct {
	DockerManifestDigest string `json:"docker-manifest-digest"`
}

// ParseSimpleSigning parses an untrusted simple signing payload. It checks the
// shape (cosign type, a digest and a reference are present), not the claims.
func ParseSimpleSigning(data []byte) (SimpleSigning, error) {
	var ss SimpleSigning
	if len(data) > maxPayloadBytes {
		return ss, fmt.Errorf("simple signing payload of %d bytes exceeds %d", len(data), maxPayloadBytes)
	}
	if err := json.Unmarshal(data, &ss); err != nil {
		return SimpleSigning{}, fmt.Errorf("simple signing payload: %w", err)
	}
	switch {
	case ss.Critical.Type != SimpleSigningType:
		return SimpleSigning{}, fmt.Errorf("simple signing payload: critical.type is %q, want %q", ss.Critical.Type, SimpleSigningType)
	case ss.Critical.Image.DockerManifestDigest == "":
		return SimpleSigning{}, errors.New("simple signing payload: critical.image.docker-manifest-digest is empty")
	case ss.Critical.Identity.DockerReference == "":
		return SimpleSigning{}, errors.New("simple signing payload: critical.identity.docker-reference is empty")
	}
	return ss, nil
}

// Envelope is a DSSE v1 envelope.
type Envelope struct {
	PayloadType string              `json:"payloadType"`
	Payload     string              `json:"payload"` // standard base64
	Signatures  []EnvelopeSignature `json:"signatures"`
}

// EnvelopeSignature is one signature of a DSSE envelope.
type EnvelopeSignature struct {
	KeyID string `json:"keyid"`
	Sig   string `json:"sig"` // standard base64
}

// parseEnvelope parses an untrusted DSSE envelope and decodes its payload.
func parseEnvelope(data []byte) (Envelope, []byte, error) {
	var env Envelope
	if len(data) > maxEnvelopeBytes {
		return env, nil, fmt.Errorf("DSSE envelope of %d bytes exceeds %d", len(data), maxEnvelopeBytes)
	}
	if err := json.Unmarshal(data, &env); err != nil {
		return Envelope{}, nil, fmt.Errorf("DSSE envelope: %w", err)
	}
	if env.PayloadType != PayloadTypeInToto {
		return Envelope{}, nil, fmt.Errorf("DSSE envelope: payloadType is %q, want %q", env.PayloadType, PayloadTypeInToto)
	}
	if len(env.Signatures) == 0 {
		return Envelope{}, nil, errors.New("DSSE envelope: no signatures")
	}
	payload, err := base64.StdEncoding.DecodeString(env.Payload)
	if err != nil {
		return Envelope{}, nil, fmt.Errorf("DSSE envelope: payload is not base64: %w", err)
	}
	return env, payload, nil
}

// pae is DSSE v1's pre-authentication encoding, the bytes actually signed:
// "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body.
func pae(payloadType string, payload []byte) []byte {
	var b bytes.Buffer
	b.Grow(32 + len(payloadType) + len(payload))
	b.WriteString("DSSEv1 ")
	b.WriteString(strconv.Itoa(len(payloadType)))
	b.WriteByte(' ')
	b.WriteString(payloadType)
	b.WriteByte(' ')
	b.WriteString(strconv.Itoa(len(payload)))
	b.WriteByte(' ')
	b.Write(payload)
	return b.Bytes()
}

// Statement is an in-toto statement (v0.1 or v1 share this shape).
type Statement struct {
	Type          string          `json:"_type"`
	Subject       []Subject       `json:"subject"`
	PredicateType string          `json:"predicateType"`
	Predicate     json.RawMessage `json:"predicate,omitempty"`
}

// Subject is one artifact a statement is about.
type Subject struct {
	Name   string            `json:"name"`
	Digest map[string]string `json:"digest"`
}

// ParseStatement parses an untrusted in-toto statement: a known _type, at least
// one subject and a predicateType. It does not restrict the predicate type.
func ParseStatement(data []byte) (Statement, error) {
	var st Statement
	if len(data) > maxEnvelopeBytes {
		return st, fmt.Errorf("in-toto statement of %d bytes exceeds %d", len(data), maxEnvelopeBytes)
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return Statement{}, fmt.Errorf("in-toto statement: %w", err)
	}
	switch {
	case st.Type != StatementTypeV01 && st.Type != StatementTypeV1:
		return Statement{}, fmt.Errorf("in-toto statement: unknown _type %q", st.Type)
	case len(st.Subject) == 0:
		return Statement{}, errors.New("in-toto statement: no subject")
	case st.PredicateType == "":
		return Statement{}, errors.New("in-toto statement: empty predicateType")
	}
	return st, nil
}

// isProvenance reports whether a predicate type is SLSA provenance v0.2 or v1.
func isProvenance(predicateType string) bool {
	return predicateType == PredicateSLSAProvenanceV02 || predicateType == PredicateSLSAProvenanceV1
}

// hasSubjectDigest reports whether any subject names sha256 hex.
func (st Statement) hasSubjectDigest(hex string) bool {
	for _, s := range st.Subject {
		if s.Digest["sha256"] == hex {
			return true
		}
	}
	return false
}
