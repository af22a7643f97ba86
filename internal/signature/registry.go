package signature

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// RepoDigest names one immutable artifact: a repository and the sha256 digest
// of a manifest in it. Digest is truth; there is no tag here on purpose.
type RepoDigest struct {
	Repository name.Repository
	Digest     v1.Hash
}

// NewRepoDigest checks digest is "sha256:<64 lowercase hex>".
func NewRepoDigest(repo name.Repository, digest string) (RepoDigest, error) {
	h, err := parseSHA256(digest)
	if err != nil {
		return RepoDigest{}, err
	}
	return RepoDigest{Repository: repo, Digest: h}, nil
}

// ParseRepoDigest parses "registry/repo@sha256:<hex>". Pass name.Insecure for
// plain-HTTP registries.
func ParseRepoDigest(s string, opts ...name.Option) (RepoDigest, error) {
	d, err := name.NewDigest(s, append([]name.Option{name.StrictValidation}, opts...)...)
	if err != nil {
		return RepoDigest{}, fmt.Errorf("signature: parse %q: %w", s, err)
	}
	return NewRepoDigest(d.Context(), d.DigestStr())
}

func parseSHA256(digest string) (v1.Hash, error) {
	hexPart, ok := strings.CutPrefix(digest, "sha256:")
	if !ok || len(hexPart) != 64 || strings.Trim(hexPart, "0123456789abcdef") != "" {
		return v1.Hash{}, fmt.Errorf("signature: digest %q is not sha256:<64 lowercase hex>", digest)
	}
	return v1.Hash{Algorithm: "sha256", Hex: hexPart}, nil
}

// String is "registry/repo@sha256:<hex>".
func (r RepoDigest) String() string { return r.Repository.Name() + "@" + r.Digest.String() }

// SignatureTag is the cosign tag-based discovery location of signatures: sha256-<hex>.sig.
func (r RepoDigest) SignatureTag() name.Tag {
	return r.Repository.Tag(r.Digest.Algorithm + "-" + r.Digest.Hex + ".sig")
}

// AttestationTag is the cosign location of attestations: sha256-<hex>.att.
func (r RepoDigest) AttestationTag() name.Tag {
	return r.Repository.Tag(r.Digest.Algorithm + "-" + r.Digest.Hex + ".att")
}

// Options carry what the caller decides about the registry conversation.
type Options struct {
	// Remote is passed to go-containerregistry: auth (remote.WithAuth), transport
	// (remote.WithTransport), user agent, ... The context is added by this package.
	Remote []remote.Option
	// Identity is the docker-reference written into (SignImage) or required in
	// (VerifyImage) a simple signing payload. Default: ref.Repository.Name(), as cosign writes it.
	Identity string
}

func (o Options) remote(ctx context.Context) []remote.Option {
	out := make([]remote.Option, 0, len(o.Remote)+1)
	out = append(out, o.Remote...)
	return append(out, remote.WithContext(ctx))
}

func (o Options) identity(ref RepoDigest) string {
	if o.Identity != "" {
		return o.Identity
	}
	return ref.Repository.Name()
}

// isNotFound reports whether a registry error means "this manifest does not exist".
func isNotFound(err error) bool {
	var terr *transport.Error
	if !errors.As(err, &terr) {
		return false
	}
	if terr.StatusCode == http.StatusNotFound {
		return true
	}
	for _, d := range terr.Errors {
		if d.Code == transport.ManifestUnknownErrorCode || d.Code == transport.NameUnknownErrorCode {
			return true
		}
	}
	return false
}

// isTransportFailure reports whether err means "could not ask the registry"
// (network, auth, server error, cancellation) rather than "the content is bad".
func isTransportFailure(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var terr *transport.Error
	if errors.As(err, &terr) {
		return !isNotFound(err)
	}
	var uerr *url.Error
	var nerr net.Error
	return errors.As(err, &uerr) || errors.As(err, &nerr)
}

// fetchManifest reads the image at tag; found=false when the tag does not exist.
func fetchManifest(ctx context.Context, tag name.Tag, opts Options) (img v1.Image, m *v1.Manifest, found bool, err error) {
	img, err = remote.Image(tag, opts.remote(ctx)...)
	if isNotFound(err) {
		return nil, nil, false, nil
	}
	if err != nil {
		return nil, nil, false, fmt.Errorf("signature: read %s: %w", tag, err)
	}
	m, err = img.Manifest()
	if err != nil {
		return nil, nil, false, fmt.Errorf("signature: read manifest %s: %w", tag, err)
	}
	return img, m, true, nil
}

// readLayer reads one layer blob, refusing blobs larger than limit. The remote
// layer verifies the blob against its digest while it is read.
//
// A descriptor that names foreign URLs is refused before anything is read:
// go-containerregistry falls back to fetching such a layer from its URLs when
// the registry lacks the blob, so whoever can push a signature or attestation
// manifest could make the verifier send requests to any host it names.
// Signatures and attestations live in the registry, nowhere else.
func readLayer(img v1.Image, desc v1.Descriptor, limit int64) ([]byte, error) {
	if len(desc.URLs) > 0 {
		return nil, fmt.Errorf("layer %s names foreign URLs; signature and attestation layers must be served by the registry", desc.Digest)
	}
	if desc.Size < 0 || desc.Size > limit {
		return nil, fmt.Errorf("layer %s has size %d (limit %d)", desc.Digest, desc.Size, limit)
	}
	layer, err := img.LayerByDigest(desc.Digest)
	if err != nil {
		return nil, fmt.Errorf("layer %s: %w", desc.Digest, err)
	}
	rc, err := layer.Compressed()
	if err != nil {
		return nil, fmt.Errorf("layer %s: %w", desc.Digest, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, limit+1))
	if err != nil {
		return nil, fmt.Errorf("layer %s: %w", desc.Digest, err)
	}
	if int64(len(b)) != desc.Size {
		return nil, fmt.Errorf("layer %s: read %d bytes, descriptor says %d", desc.Digest, len(b), desc.Size)
	}
	return b, nil
}
