package signature

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
)

func TestSimpleSigningPayloadShape(t *testing.T) {
	t.Parallel()
	// The exact bytes cosign writes for `cosign sign --key` (no annotations).
	repo, err := name.NewRepository("registry.example.com/gpuaas/apps/p/a")
	if err != nil {
		t.Fatal(err)
	}
	ref, err := NewRepoDigest(repo, "sha256:"+strings.Repeat("0f", 32))
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.Marshal(SimpleSigning{Critical: Critical{
		Identity: Identity{DockerReference: ref.Repository.Name()},
		Image:    Image{DockerManifestDigest: ref.Digest.String()},
		Type:     SimpleSigningType,
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"critical":{"identity":{"docker-reference":"registry.example.com/gpuaas/apps/p/a"},"image":{"docker-manifest-digest":"sha256:` +
		strings.Repeat("0f", 32) + `"},"type":"cosign container image signature"},"optional":null}`
	if string(got) != want {
		t.Fatalf("payload\n got %s\nwant %s", got, want)
	}
	if ref.SignatureTag().TagStr() != "sha256-"+strings.Repeat("0f", 32)+".sig" {
		t.Fatal(ref.SignatureTag())
	}
	if ref.AttestationTag().TagStr() != "sha256-"+strings.Repeat("0f", 32)+".att" {
		t.Fatal(ref.AttestationTag())
	}
	// The spec's example spells the key "Docker-manifest-digest"; accept it.
	ss, err := ParseSimpleSigning([]byte(`{"critical":{"identity":{"docker-reference":"r"},"image":{"Docker-manifest-digest":"sha256:ab"},"type":"cosign container image signature"}}`))
	if err != nil || ss.Critical.Image.DockerManifestDigest != "sha256:ab" {
		t.Fatalf("ss=%+v err=%v", ss, err)
	}
}

func TestPAE(t *testing.T) {
	t.Parallel()
	// Test vector from the DSSE v1 protocol description.
	got := string(pae("http://example.com/HelloWorld", []byte("hello world")))
	if want := "DSSEv1 29 http://example.com/HelloWorld 11 hello world"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestParseRepoDigest(t *testing.T) {
	t.Parallel()
	hex := strings.Repeat("a1", 32)
	r, err := ParseRepoDigest("registry.example.com/gpuaas/apps/p/a@sha256:" + hex)
	if err != nil {
		t.Fatal(err)
	}
	if r.String() != "registry.example.com/gpuaas/apps/p/a@sha256:"+hex {
		t.Fatal(r)
	}
	for _, bad := range []string{
		"registry.example.com/a:latest",
		"registry.example.com/a@sha256:" + strings.ToUpper(hex),
		"registry.example.com/a@sha512:" + hex + hex,
		"registry.example.com/a@sha256:abc",
	} {
		if _, err := ParseRepoDigest(bad); err == nil {
			t.Errorf("ParseRepoDigest(%q) accepted", bad)
		}
	}
}

func TestKeys(t *testing.T) {
	t.Parallel()
	for _, alg := range []Algorithm{AlgECDSAP256, AlgEd25519} {
		privPEM, pubPEM, err := GenerateKeyPair(alg)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(pubPEM), "BEGIN PUBLIC KEY") || !strings.Contains(string(privPEM), "BEGIN PRIVATE KEY") {
			t.Fatalf("%s: unexpected PEM types", alg)
		}
		signer, err := ParsePrivateKeyPEM(privPEM)
		if err != nil {
			t.Fatal(err)
		}
		pub, err := ParsePublicKeyPEM(pubPEM)
		if err != nil {
			t.Fatal(err)
		}
		sig, err := signMessage(signer, []byte("msg"))
		if err != nil {
			t.Fatal(err)
		}
		if !verifyMessage(pub, []byte("msg"), sig) || verifyMessage(pub, []byte("msh"), sig) {
			t.Fatalf("%s: sign/verify round trip failed", alg)
		}
		fp1, err := Fingerprint(pub)
		if err != nil {
			t.Fatal(err)
		}
		fp2, _ := Fingerprint(signer.Public())
		if fp1 != fp2 || !strings.HasPrefix(fp1, "sha256:") {
			t.Fatalf("fingerprints %s %s", fp1, fp2)
		}
	}
	if _, _, err := GenerateKeyPair("dsa"); err == nil {
		t.Fatal("unknown algorithm accepted")
	}
	// P-384 is refused: cosign's key-based scheme pairs ECDSA with SHA-256 on P-256.
	k384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(k384.Public())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParsePublicKeyPEM(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})); err == nil {
		t.Fatal("P-384 key accepted")
	}
	if _, err := ParsePublicKeyPEM([]byte("not pem")); err == nil {
		t.Fatal("garbage accepted")
	}
	if _, err := NewVerifier(); err == nil {
		t.Fatal("empty verifier accepted")
	}
	a := newTestKey(t, "a", AlgEd25519)
	if _, err := NewVerifier(a.public, a.public); err == nil {
		t.Fatal("duplicate ids accepted")
	}
	if _, err := NewVerifier(PublicKey{Key: a.public.Key}); err == nil {
		t.Fatal("empty id accepted")
	}
}

func FuzzParseSimpleSigning(f *testing.F) {
	f.Add([]byte(`{"critical":{"identity":{"docker-reference":"r.example/a/b"},"image":{"docker-manifest-digest":"sha256:` + strings.Repeat("0", 64) + `"},"type":"cosign container image signature"},"optional":null}`))
	f.Add([]byte(`{"critical":{"identity":{"docker-reference":"x"},"image":{"Docker-manifest-digest":"sha256:1"},"type":"cosign container image signature"},"optional":{"a":1,"b":[true,null]}}`))
	f.Add([]byte(`{"critical":null}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"critical":{"type":"atomic container signature"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		ss, err := ParseSimpleSigning(data)
		if err != nil {
			if !reflect.DeepEqual(ss, SimpleSigning{}) {
				t.Fatalf("error with non-zero result: %+v", ss)
			}
			return
		}
		if ss.Critical.Type != SimpleSigningType || ss.Critical.Image.DockerManifestDigest == "" || ss.Critical.Identity.DockerReference == "" {
			t.Fatalf("accepted incomplete payload: %+v", ss)
		}
		// Re-encoding an accepted payload gives one that parses to the same claims.
		again, err := json.Marshal(ss)
		if err != nil {
			t.Fatal(err)
		}
		ss2, err := ParseSimpleSigning(again)
		if err != nil {
			t.Fatalf("re-encoded payload refused: %v\n%s", err, again)
		}
		if ss2.Critical != ss.Critical {
			t.Fatalf("claims changed: %+v -> %+v", ss.Critical, ss2.Critical)
		}
	})
}

func FuzzParseStatement(f *testing.F) {
	hex := strings.Repeat("0", 64)
	f.Add([]byte(`{"_type":"https://in-toto.io/Statement/v1","subject":[{"name":"a","digest":{"sha256":"` + hex + `"}}],"predicateType":"https://slsa.dev/provenance/v1","predicate":{}}`))
	f.Add([]byte(`{"_type":"https://in-toto.io/Statement/v0.1","subject":[{"digest":{"sha256":""}}],"predicateType":"https://slsa.dev/provenance/v0.2"}`))
	f.Add([]byte(`{"_type":"https://in-toto.io/Statement/v1","subject":[],"predicateType":"x"}`))
	f.Add([]byte(`{"payloadType":"application/vnd.in-toto+json","payload":"e30=","signatures":[{"sig":"AA=="}]}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := ParseStatement(data)
		if err == nil {
			if st.Type != StatementTypeV01 && st.Type != StatementTypeV1 || len(st.Subject) == 0 || st.PredicateType == "" {
				t.Fatalf("accepted incomplete statement: %+v", st)
			}
			again, err := json.Marshal(st)
			if err != nil {
				t.Fatalf("accepted statement does not re-encode: %v", err)
			}
			st2, err := ParseStatement(again)
			if err != nil || st2.PredicateType != st.PredicateType || len(st2.Subject) != len(st.Subject) {
				t.Fatalf("re-encoded statement differs: %+v %v", st2, err)
			}
			_ = st.hasSubjectDigest(hex)
		}
		// The same bytes as a DSSE envelope must not panic either.
		if env, payload, err := parseEnvelope(data); err == nil {
			if env.PayloadType != PayloadTypeInToto || len(env.Signatures) == 0 {
				t.Fatalf("accepted incomplete envelope: %+v", env)
			}
			_ = pae(env.PayloadType, payload)
		}
	})
}
