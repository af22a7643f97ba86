package signature

import (
	"bytes"
	"context"
	"crypto"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// OptionalKeyID is the simple signing "optional" claim in which SignImage
// records the signer's key id. It is an unauthenticated hint for humans:
// verification tries every registered key and reports the one that verified.
const OptionalKeyID = "dev.gpuaas.signing-key-id"

// Attachment describes a signature or attestation layer written next to an image.
type Attachment struct {
	Tag      string // registry/repo:sha256-<hex>.sig or .att
	Manifest string // digest of the signature/attestation manifest after the write
	Layer    string // digest of the payload or envelope layer
}

// SignImage signs ref with signer and appends the signature to the manifest at
// tag sha256-<hex>.sig, in the cosign layout described in the package comment
// (what `cosign sign --key` writes; `cosign verify --key` accepts it). Existing
// signatures by other keys are kept. Concurrent signers of the same digest
// race on the tag, as with cosign: the last write wins.
func SignImage(ctx context.Context, ref RepoDigest, signer crypto.Signer, keyID string, opts Options) (Attachment, error) {
	ss := SimpleSigning{Critical: Critical{
		Identity: Identity{DockerReference: opts.identity(ref)},
		Image:    Image{DockerManifestDigest: ref.Digest.String()},
		Type:     SimpleSigningType,
	}}
	if keyID != "" {
		ss.Optional = map[string]any{OptionalKeyID: keyID}
	}
	payload, err := json.Marshal(ss)
	if err != nil {
		return Attachment{}, fmt.Errorf("signature: encode payload: %w", err)
	}
	sig, err := signMessage(signer, payload)
	if err != nil {
		return Attachment{}, fmt.Errorf("signature: sign %s: %w", ref, err)
	}
	return appendLayer(ctx, ref.SignatureTag(), layerSpec{
		content:     payload,
		mediaType:   MediaTypeSimpleSigning,
		annotations: map[string]string{AnnotationSignature: base64.StdEncoding.EncodeToString(sig)},
	}, opts)
}

// Predicate is the body of a provenance statement.
type Predicate struct {
	Type string          // PredicateSLSAProvenanceV02 or PredicateSLSAProvenanceV1
	Body json.RawMessage // the SLSA predicate object; "{}" when empty
}

// AttestProvenance wraps an in-toto v1 statement (subject: ref's digest) with
// the SLSA predicate in a DSSE envelope signed by signer, and appends it to the
// manifest at tag sha256-<hex>.att, in the layout of `cosign attest --key`.
func AttestProvenance(ctx context.Context, ref RepoDigest, signer crypto.Signer, predicate Predicate, opts Options) (Attachment, error) {
	if !isProvenance(predicate.Type) {
		return Attachment{}, fmt.Errorf("signature: predicate type %q is not SLSA provenance v0.2 or v1", predicate.Type)
	}
	body := predicate.Body
	if len(bytes.TrimSpace(body)) == 0 {
		body = json.RawMessage("{}")
	}
	if !json.Valid(body) || bytes.TrimSpace(body)[0] != '{' {
		return Attachment{}, fmt.Errorf("signature: predicate body is not a JSON object")
	}
	statement, err := json.Marshal(Statement{
		Type:          StatementTypeV1,
		Subject:       []Subject{{Name: ref.Repository.Name(), Digest: map[string]string{"sha256": ref.Digest.Hex}}},
		PredicateType: predicate.Type,
		Predicate:     body,
	})
	if err != nil {
		return Attachment{}, fmt.Errorf("signature: encode statement: %w", err)
	}
	envelope, err := signEnvelope(signer, statement)
	if err != nil {
		return Attachment{}, fmt.Errorf("signature: attest %s: %w", ref, err)
	}
	return appendLayer(ctx, ref.AttestationTag(), layerSpec{
		content:   envelope,
		mediaType: MediaTypeDSSE,
		annotations: map[string]string{
			AnnotationSignature:     "", // cosign sets it empty: the signature lives in the envelope
			AnnotationPredicateType: predicate.Type,
		},
	}, opts)
}

// signEnvelope returns the JSON of a DSSE envelope around an in-toto statement.
// The keyid is left empty, as cosign does for key-based attestations.
func signEnvelope(signer crypto.Signer, statement []byte) ([]byte, error) {
	sig, err := signMessage(signer, pae(PayloadTypeInToto, statement))
	if err != nil {
		return nil, err
	}
	return json.Marshal(Envelope{
		PayloadType: PayloadTypeInToto,
		Payload:     base64.StdEncoding.EncodeToString(statement),
		Signatures:  []EnvelopeSignature{{Sig: base64.StdEncoding.EncodeToString(sig)}},
	})
}

type layerSpec struct {
	content     []byte
	mediaType   string
	annotations map[string]string
}

// appendLayer adds a layer to the manifest at tag (creating it when absent) and
// writes it back. A layer already present with the same digest and annotations
// is not added twice.
func appendLayer(ctx context.Context, tag name.Tag, spec layerSpec, opts Options) (Attachment, error) {
	base, m, found, err := fetchManifest(ctx, tag, opts)
	if err != nil {
		return Attachment{}, err
	}
	layer := static.NewLayer(spec.content, types.MediaType(spec.mediaType))
	ld, err := layer.Digest()
	if err != nil {
		return Attachment{}, fmt.Errorf("signature: layer digest: %w", err)
	}
	if found {
		for _, d := range m.Layers {
			if d.Digest == ld && maps.Equal(d.Annotations, spec.annotations) {
				md, err := base.Digest()
				if err != nil {
					return Attachment{}, fmt.Errorf("signature: digest of %s: %w", tag, err)
				}
				return Attachment{Tag: tag.String(), Manifest: md.String(), Layer: ld.String()}, nil
			}
		}
	} else {
		base = empty.Image
	}
	md, err := writeManifest(ctx, tag, base, []layerSpec{spec}, opts)
	if err != nil {
		return Attachment{}, err
	}
	return Attachment{Tag: tag.String(), Manifest: md.String(), Layer: ld.String()}, nil
}

// writeManifest writes base plus layers as an OCI image manifest (OCI config
// media type, as cosign writes it) at tag.
func writeManifest(ctx context.Context, tag name.Tag, base v1.Image, layers []layerSpec, opts Options) (v1.Hash, error) {
	adds := make([]mutate.Addendum, 0, len(layers))
	for _, l := range layers {
		adds = append(adds, mutate.Addendum{
			Layer:       static.NewLayer(l.content, types.MediaType(l.mediaType)),
			Annotations: l.annotations,
		})
	}
	img, err := mutate.Append(base, adds...)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("signature: build %s: %w", tag, err)
	}
	img = mutate.ConfigMediaType(mutate.MediaType(img, types.OCIManifestSchema1), types.OCIConfigJSON)
	if err := remote.Write(tag, img, opts.remote(ctx)...); err != nil {
		return v1.Hash{}, fmt.Errorf("signature: write %s: %w", tag, err)
	}
	d, err := img.Digest()
	if err != nil {
		return v1.Hash{}, fmt.Errorf("signature: digest of %s: %w", tag, err)
	}
	return d, nil
}
