package blobstore

import (
	"strings"
)

// URIScheme is the scheme of canonical project-storage source URIs.
const URIScheme = "artifact_store"

const uriPrefix = URIScheme + "://"

// Key addresses one object: projects/<project_id>/artifacts/<app>/<version>/<name>.
// Every segment is a single slug-safe path element; see Validate.
type Key struct {
	ProjectID string // lowercase [a-z0-9-], 1..64 (a UUID fits)
	App       string // app slug: lowercase [a-z0-9-], no leading/trailing '-', 1..63
	Version   string // [A-Za-z0-9._+-], starting with a letter or digit, 1..128 (semver fits)
	Name      string // artifact name: lowercase [a-z0-9._-], starting with a letter or digit, 1..128
}

// Validate checks every segment. A valid key never contains '/', "..", a
// leading '.', NUL or any other character a path could be bent with.
func (k Key) Validate() error {
	if err := checkSegment("project_id", k.ProjectID, 64, isLowerAlnum, func(c byte) bool { return isLowerAlnum(c) || c == '-' }); err != nil {
		return err
	}
	if err := checkSegment("app", k.App, 63, isLowerAlnum, func(c byte) bool { return isLowerAlnum(c) || c == '-' }); err != nil {
		return err
	}
	if strings.HasSuffix(k.App, "-") {
		return fail(ErrInvalidKey, "app %q ends with '-'", k.App)
	}
	if err := checkSegment("version", k.Version, 128, isAlnum, func(c byte) bool {
		return isAlnum(c) || c == '.' || c == '_' || c == '-' || c == '+'
	}); err != nil {
		return err
	}
	return checkSegment("name", k.Name, 128, isLowerAlnum, func(c byte) bool {
		return isLowerAlnum(c) || c == '.' || c == '_' || c == '-'
	})
}

func checkSegment(field, s string, maxLen int, first, rest func(byte) bool) error {
	if s == "" {
		return fail(ErrInvalidKey, "%s is empty", field)
	}
	if len(s) > maxLen {
		return fail(ErrInvalidKey, "%s is longer than %d characters", field, maxLen)
	}
	if !first(s[0]) {
		return fail(ErrInvalidKey, "%s %q must start with a letter or digit", field, s)
	}
	for i := 1; i < len(s); i++ {
		if !rest(s[i]) {
			return fail(ErrInvalidKey, "%s %q contains %q", field, s, s[i])
		}
	}
	return nil
}

func isLowerAlnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }
func isAlnum(c byte) bool      { return isLowerAlnum(c) || c >= 'A' && c <= 'Z' }

// Path is the object's slash-separated location: projects/<p>/artifacts/<app>/<version>/<name>.
// It is only meaningful for a valid key.
func (k Key) Path() string {
	return "projects/" + k.ProjectID + "/artifacts/" + k.App + "/" + k.Version + "/" + k.Name
}

// String is the canonical URI (it does not validate; use FormatURI for that).
func (k Key) String() string { return uriPrefix + k.Path() }

// FormatURI returns artifact_store://projects/<p>/artifacts/<app>/<version>/<name>.
func FormatURI(k Key) (string, error) {
	if err := k.Validate(); err != nil {
		return "", err
	}
	return k.String(), nil
}

// ParseURI parses a canonical artifact_store:// URI. It is strict: exactly the
// six path elements, no query, fragment, userinfo, percent-encoding, empty
// or dot segments, and FormatURI(ParseURI(u)) == u for every accepted u.
func ParseURI(uri string) (Key, error) {
	rest, ok := strings.CutPrefix(uri, uriPrefix)
	if !ok {
		return Key{}, fail(ErrInvalidKey, "URI must start with %q", uriPrefix)
	}
	return ParsePath(rest)
}

// ParsePath parses the relative form projects/<p>/artifacts/<app>/<version>/<name>
// (an upload_path), with the same strictness as ParseURI.
func ParsePath(p string) (Key, error) {
	parts := strings.Split(p, "/")
	if len(parts) != 6 || parts[0] != "projects" || parts[2] != "artifacts" {
		return Key{}, fail(ErrInvalidKey, "%q is not projects/<project_id>/artifacts/<app>/<version>/<name>", p)
	}
	k := Key{ProjectID: parts[1], App: parts[3], Version: parts[4], Name: parts[5]}
	if err := k.Validate(); err != nil {
		return Key{}, err
	}
	return k, nil
}
