package artifacts

import (
	"regexp"
	"strings"

	"github.com/gpuaas/gpuaas/internal/blobstore"
	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/registry"
)

// RepositoryPrefix is the platform-owned namespace of app repositories.
const RepositoryPrefix = "gpuaas/apps"

var tagRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$`)

// ParseDigest checks an untrusted digest: only "sha256:" and 64 lowercase hex
// digits are accepted (the control plane trusts nothing else).
func ParseDigest(s string) (string, error) {
	if !blobstore.ValidDigest(s) {
		return "", errdefs.Validation([]errdefs.FieldError{{Field: "/digest", Code: "invalid_digest",
			Message: "must be sha256:<64 lowercase hex digits>, the immutable digest the registry or upload reported"}})
	}
	return s, nil
}

// ValidTag reports whether s is a valid OCI tag.
func ValidTag(s string) bool { return tagRE.MatchString(s) }

// ValidRepository reports whether s is a valid OCI repository name (without
// a registry host), at most 255 characters.
func ValidRepository(s string) bool { return registry.ValidRepository(s) }

// CanonicalRepository is the repository the control plane assigns to a
// project's app. Org and project slugs are both in the path: project slugs
// are unique only within their org, and two tenants must never share a
// repository.
func CanonicalRepository(orgSlug, projectSlug, appSlug string) string {
	return RepositoryPrefix + "/" + orgSlug + "/" + projectSlug + "/" + appSlug
}

// TagHint turns an app version into a valid tag ("+" is not allowed in tags).
func TagHint(version string) string {
	t := strings.ReplaceAll(version, "+", "-")
	if !ValidTag(t) {
		return ""
	}
	return t
}

// ImageRef is a parsed "host[:port]/repository[:tag][@digest]" reference.
type ImageRef struct {
	Host, Repository, Tag, Digest string
}

// ParseImageRef parses an untrusted image reference. A host is required
// (the first path element must look like a host: contain '.' or ':' or be
// "localhost"); tag and digest are optional.
func ParseImageRef(s string) (ImageRef, error) {
	bad := func(why string) (ImageRef, error) {
		return ImageRef{}, errdefs.Invalid("invalid_reference", "image reference %q: %s", s, why)
	}
	if s == "" || len(s) > 1024 || strings.ContainsAny(s, " \t\r\n\\") {
		return bad("empty, too long or contains whitespace")
	}
	var r ImageRef
	rest := s
	if i := strings.IndexByte(rest, '@'); i >= 0 {
		d, err := ParseDigest(rest[i+1:])
		if err != nil {
			return bad("the digest must be sha256:<64 lowercase hex>")
		}
		r.Digest, rest = d, rest[:i]
	}
	host, path, ok := strings.Cut(rest, "/")
	if !ok || !(strings.ContainsAny(host, ".:") || host == "localhost") {
		return bad("it must start with a registry host (host[:port]/repository)")
	}
	if strings.ContainsAny(host, "/@") || strings.HasPrefix(host, ":") || strings.HasSuffix(host, ":") {
		return bad("malformed registry host")
	}
	if i := strings.LastIndexByte(path, ':'); i >= 0 {
		r.Tag, path = path[i+1:], path[:i]
		if !ValidTag(r.Tag) {
			return bad("malformed tag")
		}
	}
	if !ValidRepository(path) {
		return bad("malformed repository name")
	}
	r.Host, r.Repository = host, path
	return r, nil
}

// String renders the reference.
func (r ImageRef) String() string {
	s := r.Host + "/" + r.Repository
	if r.Tag != "" {
		s += ":" + r.Tag
	}
	if r.Digest != "" {
		s += "@" + r.Digest
	}
	return s
}
