package signature

import (
	"bytes"
	"crypto"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
)

type testKey struct {
	id     string
	signer crypto.Signer
	public PublicKey
}

func newTestKey(t *testing.T, id string, alg Algorithm) testKey {
	t.Helper()
	privPEM, pubPEM, err := GenerateKeyPair(alg)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ParsePrivateKeyPEM(privPEM)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := ParsePublicKeyPEM(pubPEM)
	if err != nil {
		t.Fatal(err)
	}
	return testKey{id: id, signer: signer, public: PublicKey{ID: id, Key: pub}}
}

func newVerifier(t *testing.T, keys ...testKey) *Verifier {
	t.Helper()
	pks := make([]PublicKey, len(keys))
	for i, k := range keys {
		pks[i] = k.public
	}
	v, err := NewVerifier(pks...)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func wantReason(t *testing.T, err error, want Reason, sentinel error) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %s", want)
	}
	if got := ReasonOf(err); got != want {
		t.Fatalf("reason = %q, want %q (err: %v)", got, want, err)
	}
	if !errors.Is(err, sentinel) {
		t.Fatalf("errors.Is(%v, %v) = false", err, sentinel)
	}
	if !strings.HasPrefix(err.Error(), string(want)+": ") {
		t.Fatalf("message %q does not start with the reason", err.Error())
	}
	t.Logf("%s", err)
}

// sigLayers returns the payload and signature annotation of every layer of ref's signature manifest.
func sigLayers(t *testing.T, ref RepoDigest) []layerSpec {
	t.Helper()
	img, m, found, err := fetchManifest(t.Context(), ref.SignatureTag(), Options{})
	if err != nil || !found {
		t.Fatalf("signature manifest: found=%v err=%v", found, err)
	}
	var out []layerSpec
	for _, d := range m.Layers {
		b, err := readLayer(img, d, maxEnvelopeBytes)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, layerSpec{content: b, mediaType: string(d.MediaType), annotations: d.Annotations})
	}
	return out
}

func TestVerifyImage(t *testing.T) {
	t.Parallel()
	host := newRegistry(t)
	keyA := newTestKey(t, "key-a", AlgECDSAP256)
	keyB := newTestKey(t, "key-b", AlgEd25519)
	ctx := t.Context()

	t.Run("signed with A verifies with {A}", func(t *testing.T) {
		ref := pushRandomImage(t, host, "gpuaas/apps/p1/signed")
		att, err := SignImage(ctx, ref, keyA.signer, keyA.id, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if want := ref.Repository.Name() + ":sha256-" + ref.Digest.Hex + ".sig"; att.Tag != want {
			t.Fatalf("tag = %s, want %s", att.Tag, want)
		}
		res, err := newVerifier(t, keyA).VerifyImage(ctx, ref, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if res.KeyID != keyA.id || res.Ref != ref.String() || res.SignatureManifest != att.Manifest {
			t.Fatalf("result = %+v (attachment %+v)", res, att)
		}
		// With both keys registered, A's id is still reported.
		res, err = newVerifier(t, keyB, keyA).VerifyImage(ctx, ref, Options{})
		if err != nil || res.KeyID != keyA.id {
			t.Fatalf("res=%+v err=%v", res, err)
		}
	})

	t.Run("Ed25519 signature, second signature appended", func(t *testing.T) {
		ref := pushRandomImage(t, host, "gpuaas/apps/p1/two-sigs")
		if _, err := SignImage(ctx, ref, keyA.signer, keyA.id, Options{}); err != nil {
			t.Fatal(err)
		}
		if _, err := SignImage(ctx, ref, keyB.signer, keyB.id, Options{}); err != nil {
			t.Fatal(err)
		}
		if n := len(sigLayers(t, ref)); n != 2 {
			t.Fatalf("signature layers = %d, want 2", n)
		}
		res, err := newVerifier(t, keyB).VerifyImage(ctx, ref, Options{})
		if err != nil || res.KeyID != keyB.id {
			t.Fatalf("res=%+v err=%v", res, err)
		}
	})

	t.Run("other key is signature_invalid", func(t *testing.T) {
		ref := pushRandomImage(t, host, "gpuaas/apps/p1/other-key")
		if _, err := SignImage(ctx, ref, keyA.signer, keyA.id, Options{}); err != nil {
			t.Fatal(err)
		}
		_, err := newVerifier(t, keyB).VerifyImage(ctx, ref, Options{})
		wantReason(t, err, ReasonSignatureInvalid, ErrSignatureInvalid)
	})

	t.Run("tampered payload is signature_invalid", func(t *testing.T) {
		ref := pushRandomImage(t, host, "gpuaas/apps/p1/tampered")
		if _, err := SignImage(ctx, ref, keyA.signer, keyA.id, Options{}); err != nil {
			t.Fatal(err)
		}
		layers := sigLayers(t, ref)
		// Same digest claim, one extra optional claim, old signature.
		layers[0].content = bytes.Replace(layers[0].content, []byte(`"optional":{`), []byte(`"optional":{"approved":"yes",`), 1)
		if _, err := writeManifest(ctx, ref.SignatureTag(), empty.Image, layers, Options{}); err != nil {
			t.Fatal(err)
		}
		if _, err := ParseSimpleSigning(sigLayers(t, ref)[0].content); err != nil {
			t.Fatalf("tampered payload should still parse: %v", err)
		}
		_, err := newVerifier(t, keyA).VerifyImage(ctx, ref, Options{})
		wantReason(t, err, ReasonSignatureInvalid, ErrSignatureInvalid)
	})

	t.Run("no signature is signature_missing", func(t *testing.T) {
		ref := pushRandomImage(t, host, "gpuaas/apps/p1/unsigned")
		_, err := newVerifier(t, keyA).VerifyImage(ctx, ref, Options{})
		wantReason(t, err, ReasonSignatureMissing, ErrSignatureMissing)
	})

	t.Run("signature manifest without simple signing layers is signature_missing", func(t *testing.T) {
		ref := pushRandomImage(t, host, "gpuaas/apps/p1/empty-sig")
		if _, err := writeManifest(ctx, ref.SignatureTag(), empty.Image, []layerSpec{{content: []byte("x"), mediaType: "text/plain"}}, Options{}); err != nil {
			t.Fatal(err)
		}
		_, err := newVerifier(t, keyA).VerifyImage(ctx, ref, Options{})
		wantReason(t, err, ReasonSignatureMissing, ErrSignatureMissing)
	})

	t.Run("signature naming another digest is digest_mismatch", func(t *testing.T) {
		ref := pushRandomImage(t, host, "gpuaas/apps/p1/mismatch")
		other := pushRandomImage(t, host, "gpuaas/apps/p1/mismatch")
		payload, err := json.Marshal(SimpleSigning{Critical: Critical{
			Identity: Identity{DockerReference: ref.Repository.Name()},
			Image:    Image{DockerManifestDigest: other.Digest.String()},
			Type:     SimpleSigningType,
		}})
		if err != nil {
			t.Fatal(err)
		}
		sig, err := signMessage(keyA.signer, payload)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := appendLayer(ctx, ref.SignatureTag(), layerSpec{
			content:     payload,
			mediaType:   MediaTypeSimpleSigning,
			annotations: map[string]string{AnnotationSignature: base64.StdEncoding.EncodeToString(sig)},
		}, Options{}); err != nil {
			t.Fatal(err)
		}
		_, err = newVerifier(t, keyA).VerifyImage(ctx, ref, Options{})
		wantReason(t, err, ReasonDigestMismatch, ErrDigestMismatch)
		if !strings.Contains(err.Error(), other.Digest.String()) {
			t.Fatalf("message should name the other digest: %v", err)
		}
	})

	t.Run("signature for another repository is identity_mismatch", func(t *testing.T) {
		ref := pushRandomImage(t, host, "gpuaas/apps/p1/identity")
		opts := Options{Identity: "registry.example.com/gpuaas/apps/p2/identity"}
		if _, err := SignImage(ctx, ref, keyA.signer, keyA.id, opts); err != nil {
			t.Fatal(err)
		}
		_, err := newVerifier(t, keyA).VerifyImage(ctx, ref, Options{})
		wantReason(t, err, ReasonIdentityMismatch, ErrIdentityMismatch)
		// The same identity, named with a tag, is accepted when asked for.
		if _, err := newVerifier(t, keyA).VerifyImage(ctx, ref, Options{Identity: opts.Identity + ":v1"}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("re-signing with the same payload and signature is idempotent", func(t *testing.T) {
		ref := pushRandomImage(t, host, "gpuaas/apps/p1/idem")
		spec := layerSpec{content: []byte(`{}`), mediaType: MediaTypeSimpleSigning, annotations: map[string]string{AnnotationSignature: "AA=="}}
		a1, err := appendLayer(ctx, ref.SignatureTag(), spec, Options{})
		if err != nil {
			t.Fatal(err)
		}
		a2, err := appendLayer(ctx, ref.SignatureTag(), spec, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if a1 != a2 {
			t.Fatalf("%+v != %+v", a1, a2)
		}
	})
}

func TestVerifyImageRegistryDownIsNotAReason(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(nil)
	host := strings.TrimPrefix(srv.URL, "http://")
	srv.Close()
	repo, err := name.NewRepository(host+"/gpuaas/apps/p1/x", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := NewRepoDigest(repo, "sha256:"+strings.Repeat("ab", 32))
	if err != nil {
		t.Fatal(err)
	}
	key := newTestKey(t, "a", AlgECDSAP256)
	_, err = newVerifier(t, key).VerifyImage(t.Context(), ref, Options{})
	if err == nil || ReasonOf(err) != "" {
		t.Fatalf("err = %v (reason %q), want a transport error without a reason", err, ReasonOf(err))
	}
	_, err = newVerifier(t, key).VerifyProvenance(t.Context(), ref, Options{})
	if err == nil || ReasonOf(err) != "" {
		t.Fatalf("err = %v (reason %q), want a transport error without a reason", err, ReasonOf(err))
	}
}

func TestVerifyProvenance(t *testing.T) {
	t.Parallel()
	host := newRegistry(t)
	keyA := newTestKey(t, "key-a", AlgEd25519)
	keyB := newTestKey(t, "key-b", AlgECDSAP256)
	ctx := t.Context()
	predicate := Predicate{
		Type: PredicateSLSAProvenanceV1,
		Body: json.RawMessage(`{"buildDefinition":{"buildType":"https://gpuaas.dev/ci/v1","externalParameters":{"ref":"main"}},"runDetails":{"builder":{"id":"https://ci.example.com"}}}`),
	}

	t.Run("attached provenance verifies", func(t *testing.T) {
		ref := pushRandomImage(t, host, "gpuaas/apps/p1/prov")
		att, err := AttestProvenance(ctx, ref, keyA.signer, predicate, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(att.Tag, ":sha256-"+ref.Digest.Hex+".att") {
			t.Fatalf("tag = %s", att.Tag)
		}
		res, err := newVerifier(t, keyB, keyA).VerifyProvenance(ctx, ref, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if res.KeyID != keyA.id || res.PredicateType != PredicateSLSAProvenanceV1 || res.StatementType != StatementTypeV1 || res.AttestationManifest != att.Manifest {
			t.Fatalf("result = %+v", res)
		}
		var body map[string]any
		if err := json.Unmarshal(res.Predicate, &body); err != nil || body["runDetails"] == nil {
			t.Fatalf("predicate = %s (%v)", res.Predicate, err)
		}
	})

	t.Run("in-toto v0.1 statement with SLSA v0.2 verifies", func(t *testing.T) {
		ref := pushRandomImage(t, host, "gpuaas/apps/p1/prov02")
		attachStatement(t, ref, keyB.signer, Statement{
			Type:          StatementTypeV01,
			Subject:       []Subject{{Name: "x", Digest: map[string]string{"sha256": ref.Digest.Hex}}},
			PredicateType: PredicateSLSAProvenanceV02,
			Predicate:     json.RawMessage(`{"builder":{"id":"ci"}}`),
		})
		res, err := newVerifier(t, keyB).VerifyProvenance(ctx, ref, Options{})
		if err != nil || res.PredicateType != PredicateSLSAProvenanceV02 || res.KeyID != keyB.id {
			t.Fatalf("res=%+v err=%v", res, err)
		}
	})

	t.Run("missing is provenance_missing", func(t *testing.T) {
		ref := pushRandomImage(t, host, "gpuaas/apps/p1/noprov")
		// A signature alone is not provenance.
		if _, err := SignImage(ctx, ref, keyA.signer, keyA.id, Options{}); err != nil {
			t.Fatal(err)
		}
		_, err := newVerifier(t, keyA).VerifyProvenance(ctx, ref, Options{})
		wantReason(t, err, ReasonProvenanceMissing, ErrProvenanceMissing)
	})

	t.Run("only other predicate types is provenance_missing", func(t *testing.T) {
		ref := pushRandomImage(t, host, "gpuaas/apps/p1/sbom-only")
		attachStatement(t, ref, keyA.signer, Statement{
			Type:          StatementTypeV1,
			Subject:       []Subject{{Name: "x", Digest: map[string]string{"sha256": ref.Digest.Hex}}},
			PredicateType: "https://spdx.dev/Document",
			Predicate:     json.RawMessage(`{}`),
		})
		_, err := newVerifier(t, keyA).VerifyProvenance(ctx, ref, Options{})
		wantReason(t, err, ReasonProvenanceMissing, ErrProvenanceMissing)
	})

	t.Run("wrong subject is provenance_subject_mismatch", func(t *testing.T) {
		ref := pushRandomImage(t, host, "gpuaas/apps/p1/prov-subject")
		other := pushRandomImage(t, host, "gpuaas/apps/p1/prov-subject")
		attachStatement(t, ref, keyA.signer, Statement{
			Type:          StatementTypeV1,
			Subject:       []Subject{{Name: "x", Digest: map[string]string{"sha256": other.Digest.Hex}}},
			PredicateType: PredicateSLSAProvenanceV1,
			Predicate:     json.RawMessage(`{}`),
		})
		_, err := newVerifier(t, keyA).VerifyProvenance(ctx, ref, Options{})
		wantReason(t, err, ReasonProvenanceSubjectMismatch, ErrProvenanceSubjectMismatch)
	})

	t.Run("other key is provenance_invalid", func(t *testing.T) {
		ref := pushRandomImage(t, host, "gpuaas/apps/p1/prov-key")
		if _, err := AttestProvenance(ctx, ref, keyA.signer, predicate, Options{}); err != nil {
			t.Fatal(err)
		}
		_, err := newVerifier(t, keyB).VerifyProvenance(ctx, ref, Options{})
		wantReason(t, err, ReasonProvenanceInvalid, ErrProvenanceInvalid)
	})

	t.Run("tampered statement is provenance_invalid", func(t *testing.T) {
		ref := pushRandomImage(t, host, "gpuaas/apps/p1/prov-tamper")
		statement, err := json.Marshal(Statement{
			Type:          StatementTypeV1,
			Subject:       []Subject{{Name: "x", Digest: map[string]string{"sha256": ref.Digest.Hex}}},
			PredicateType: PredicateSLSAProvenanceV1,
			Predicate:     json.RawMessage(`{"builder":"trusted"}`),
		})
		if err != nil {
			t.Fatal(err)
		}
		raw, err := signEnvelope(keyA.signer, statement)
		if err != nil {
			t.Fatal(err)
		}
		var env Envelope
		if err := json.Unmarshal(raw, &env); err != nil {
			t.Fatal(err)
		}
		env.Payload = base64.StdEncoding.EncodeToString(bytes.Replace(statement, []byte("trusted"), []byte("evil!!!"), 1))
		raw, err = json.Marshal(env)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := appendLayer(ctx, ref.AttestationTag(), layerSpec{content: raw, mediaType: MediaTypeDSSE}, Options{}); err != nil {
			t.Fatal(err)
		}
		_, err = newVerifier(t, keyA).VerifyProvenance(ctx, ref, Options{})
		wantReason(t, err, ReasonProvenanceInvalid, ErrProvenanceInvalid)
	})

	t.Run("non-provenance predicate is refused when attesting", func(t *testing.T) {
		ref := pushRandomImage(t, host, "gpuaas/apps/p1/prov-refuse")
		if _, err := AttestProvenance(ctx, ref, keyA.signer, Predicate{Type: "https://spdx.dev/Document"}, Options{}); err == nil {
			t.Fatal("want an error")
		}
		if _, err := AttestProvenance(ctx, ref, keyA.signer, Predicate{Type: PredicateSLSAProvenanceV1, Body: json.RawMessage(`[1]`)}, Options{}); err == nil {
			t.Fatal("want an error")
		}
	})
}

// attachStatement signs an arbitrary statement and appends it at ref's attestation tag.
func attachStatement(t *testing.T, ref RepoDigest, signer crypto.Signer, st Statement) {
	t.Helper()
	statement, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := signEnvelope(signer, statement)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := appendLayer(t.Context(), ref.AttestationTag(), layerSpec{
		content:     raw,
		mediaType:   MediaTypeDSSE,
		annotations: map[string]string{AnnotationSignature: "", AnnotationPredicateType: st.PredicateType},
	}, Options{}); err != nil {
		t.Fatal(err)
	}
}
