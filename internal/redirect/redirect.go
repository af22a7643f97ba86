// Package redirect keeps the redirects a request can steer (the console's
// "next" after sign-in, the gateway's path after a code is traded) on the
// origin that sends them.
package redirect

import (
	"net/url"
	"strings"
)

// Local returns p when it is a path on this origin, and "/" otherwise.
//
// Beginning with one slash is not enough: a browser reads "//host" and
// "/\host" as another host, and it drops tabs and line breaks from a URL
// before reading it, so "/<TAB>/host" is "//host" to it. Go's redirect
// writes such a value out untouched (its URL parser refuses control
// characters, so the path is not cleaned). Any control character or
// backslash, anywhere, makes p not a local path.
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
	return p
}
