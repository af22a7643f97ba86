// Package redirect keeps the redirects a request can steer (the console's
// "next" after sign-in, the gateway's path after a code is traded) on the
// origin that sends them.
package redirect

import (
	"net/url"
	"strings"
)

// Local returns p, normalised, when it is a path on this origin, and "/"
// otherwise.
//
// Beginning with one slash is not enough: a browser reads "//host" and
// "/\host" as another host, and it drops tabs and line breaks from a URL
// before reading it, so "/<TAB>/host" is "//host" to it. Go's redirect
// writes such a value out untouched (its URL parser refuses control
// characters, so the path is not cleaned). Any control character or
// backslash, anywhere, makes p not a local path.
//
// The answer is the address the browser will request, not p as written,
// so a caller that decides something by the path (the console asks before
// a "next" opens an app) decides on what is reached: dot segments are
// resolved, written plainly or percent-encoded ("%2e", "%2E"), as a
// browser does; repeated slashes are one, as Go's redirect and router
// make them; bytes a browser would percent-encode are encoded. The query
// is kept as it is, and so is a fragment (behind an empty query when there
// is none: Go's redirect cleans all before the first "?" as a path, so a
// dot segment in a bare fragment could move the path).
func Local(p string) string {
	if !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") {
		return "/"
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c < 0x20 || c == 0x7f || c == '\\' {
			return "/"
		}
	}
	if u, err := url.Parse(p); err != nil || u.Scheme != "" || u.Host != "" || u.User != nil {
		return "/"
	}
	path, rest := p, ""
	if i := strings.IndexAny(p, "?#"); i >= 0 {
		path, rest = p[:i], p[i:]
	}
	if strings.HasPrefix(rest, "#") {
		rest = "?" + rest
	}
	return cleanPath(path) + rest
}

// cleanPath resolves the dot segments of the escaped path p (starting with
// "/") as the URL standard does, drops empty segments but a final one (the
// trailing slash stays), and percent-encodes what a browser would. The
// result begins with exactly one slash and is its own cleanPath, and
// neither Go's redirect nor its router, nor a browser, changes it.
func cleanPath(p string) string {
	out := make([]string, 0, strings.Count(p, "/"))
	trailing := false
	for _, seg := range strings.Split(p[1:], "/") {
		trailing = false
		switch strings.ToLower(seg) {
		case "", ".", "%2e":
			trailing = true
		case "..", ".%2e", "%2e.", "%2e%2e":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
			trailing = true
		default:
			out = append(out, escapeSegment(seg))
		}
	}
	if len(out) == 0 {
		return "/"
	}
	if trailing {
		return "/" + strings.Join(out, "/") + "/"
	}
	return "/" + strings.Join(out, "/")
}

// escapeSegment percent-encodes the bytes of seg that are not left as they
// are in a path (spaces, quotes, angle brackets, non-ASCII); escapes
// already there stay (url.Parse checked them), so the segment means what
// it did to a server that unescapes it.
func escapeSegment(seg string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		if keep(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}

func keep(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("-._~!$&'()*+,;=:@%", c) >= 0
}
