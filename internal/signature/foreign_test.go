package signature

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// rawManifest is a manifest pushed as is (remote.Put's Taggable).
type rawManifest struct {
	body      []byte
	mediaType types.MediaType
}

func (m rawManifest) RawManifest() ([]byte, error)        { return m.body, nil }
func (m rawManifest) MediaType() (types.MediaType, error) { return m.mediaType, nil }

// A signature or attestation layer whose descriptor names foreign URLs is
// refused without a request to those URLs: the layer must come from the
// registry. go-containerregistry otherwise falls back to the URLs when the
// registry lacks the blob, so whoever can push the .sig/.att manifest could
// make the verifier fetch from any host (in external-registry mode, from
// the control plane's network). Registries other than distribution accept
// such manifests; go-containerregistry's own registry stands in for one.
func TestVerifyRefusesForeignLayerURLs(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	srv := httptest.NewServer(ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	ref := pushRandomImage(t, host, "gpuaas/apps/p/a")
	key := newTestKey(t, "k1", AlgECDSAP256)

	payload, err := json.Marshal(SimpleSigning{Critical: Critical{
		Identity: Identity{DockerReference: ref.Repository.Name()},
		Image:    Image{DockerManifestDigest: ref.Digest.String()},
		Type:     SimpleSigningType,
	}})
	if err != nil {
		t.Fatal(err)
	}
	sig, err := signMessage(key.signer, payload)
	if err != nil {
		t.Fatal(err)
	}
	statement, err := json.Marshal(Statement{Type: StatementTypeV1, PredicateType: PredicateSLSAProvenanceV1,
		Subject: []Subject{{Name: ref.Repository.Name(), Digest: map[string]string{"sha256": ref.Digest.Hex}}}, Predicate: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	envelope, err := signEnvelope(key.signer, statement)
	if err != nil {
		t.Fatal(err)
	}

	// The foreign host serves the right bytes, so only where they come
	// from is wrong.
	var hits atomic.Int64
	foreign := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		switch r.URL.Path {
		case "/payload":
			_, _ = w.Write(payload)
		case "/envelope":
			_, _ = w.Write(envelope)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(foreign.Close)
	const foreignHost = "blobs.foreign.example"
	dialer := &net.Dialer{}
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		if h, _, _ := net.SplitHostPort(addr); h == foreignHost {
			addr = foreign.Listener.Addr().String()
		}
		return dialer.DialContext(ctx, network, addr)
	}}
	t.Cleanup(tr.CloseIdleConnections)
	_, port, _ := net.SplitHostPort(foreign.Listener.Addr().String())
	foreignURL := "http://" + foreignHost + ":" + port

	put := func(tag name.Tag, content []byte, mediaType string, annotations map[string]string, path string) {
		t.Helper()
		sum := sha256.Sum256(content)
		m := v1.Manifest{
			SchemaVersion: 2,
			MediaType:     types.OCIManifestSchema1,
			Config:        v1.Descriptor{MediaType: types.OCIConfigJSON, Size: 2, Digest: v1.Hash{Algorithm: "sha256", Hex: "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"}},
			Layers: []v1.Descriptor{{
				MediaType:   types.MediaType(mediaType),
				Size:        int64(len(content)),
				Digest:      v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])},
				Annotations: annotations,
				URLs:        []string{foreignURL + path},
			}},
		}
		body, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.Put(tag, rawManifest{body, types.OCIManifestSchema1}, remote.WithContext(ctx)); err != nil {
			t.Fatal(err)
		}
	}
	put(ref.SignatureTag(), payload, MediaTypeSimpleSigning, map[string]string{AnnotationSignature: base64.StdEncoding.EncodeToString(sig)}, "/payload")
	put(ref.AttestationTag(), envelope, MediaTypeDSSE, map[string]string{AnnotationPredicateType: PredicateSLSAProvenanceV1, AnnotationSignature: ""}, "/envelope")

	v := newVerifier(t, key)
	opts := Options{Remote: []remote.Option{remote.WithTransport(tr)}}
	_, err = v.VerifyImage(ctx, ref, opts)
	wantReason(t, err, ReasonSignatureInvalid, ErrSignatureInvalid)
	_, err = v.VerifyProvenance(ctx, ref, opts)
	wantReason(t, err, ReasonProvenanceInvalid, ErrProvenanceInvalid)
	if n := hits.Load(); n != 0 {
		t.Fatalf("the verifier sent %d request(s) to a foreign layer URL", n)
	}
}
