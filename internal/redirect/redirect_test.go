package redirect

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// browserHost is the host a browser on https://console.example/ goes to
// when told to redirect to loc: it drops tabs and line breaks, reads a
// backslash as a slash (special schemes), and resolves against the page.
func browserHost(t testing.TB, loc string) string {
	t.Helper()
	loc = strings.NewReplacer("\t", "", "\n", "", "\r", "", "\\", "/").Replace(loc)
	loc = strings.TrimLeft(loc, "\x00\x01\x02\x03\x04\x05\x06\x07\x08\x0b\x0c\x0e\x0f\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f ")
	base, _ := url.Parse("https://console.example/")
	u, err := base.Parse(loc)
	if err != nil {
		return "console.example" // a browser would not leave either
	}
	return u.Host
}

func TestLocalKeepsRedirectsOnThisOrigin(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/workloads", "/workloads"},
		{"/workloads/instance/x?tab=logs#top", "/workloads/instance/x?tab=logs#top"},
		{"/workloads/instance/x#top", "/workloads/instance/x?#top"},
		{"/ui/%2F%2Fnot-a-host", "/ui/%2F%2Fnot-a-host"},
		{"", "/"},
		{"workloads", "/"},
		{"https://evil.example/", "/"},
		{"//evil.example", "/"},
		{"/\\evil.example", "/"},
		{"/\t/evil.example", "/"},
		{"/\n/evil.example", "/"},
		{"/\r\n/evil.example", "/"},
		{"/x\x00", "/"},
		{"/x\x7f", "/"},
	} {
		if got := Local(tc.in); got != tc.want {
			t.Errorf("Local(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if h := browserHost(t, Local(tc.in)); h != "console.example" {
			t.Errorf("Local(%q) sends a browser to %s", tc.in, h)
		}
	}
}

// FuzzLocal: whatever it is given, a browser following Local's answer
// stays on the origin.
func FuzzLocal(f *testing.F) {
	for _, s := range []string{"/", "//x", "/\\x", "/\t/x", "/a/b?c#d", "http://x", "/%09/x", "/\u3000/x",
		"/a/./b", "/a/%2E/b", "/a/b/.%2e/c", "/a//b/", "/a#/../b", "/.//x", "/a b "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		got := Local(p)
		if h := browserHost(t, got); h != "console.example" {
			t.Fatalf("Local(%q) = %q: a browser goes to %q", p, got, h)
		}
		if again := Local(got); again != got {
			t.Fatalf("Local(%q) = %q, but Local(%q) = %q: not normalised", p, got, got, again)
		}
		path, _, _ := strings.Cut(got, "?")
		if loc, _, _ := strings.Cut(goRedirect(got), "?"); loc != path {
			t.Fatalf("Local(%q) = %q, which Go's redirect writes as %q", p, got, goRedirect(got))
		}
		segs := strings.Split(path, "/")[1:]
		for i, s := range segs {
			if (s == "" && i != len(segs)-1) || isDotSegment(s) {
				t.Fatalf("Local(%q) = %q: segment %d (%q) is one a browser or Go would remove", p, got, i, s)
			}
		}
	})
}

// goRedirect is the Location Go's http.Redirect writes for loc.
func goRedirect(loc string) string {
	rec := httptest.NewRecorder()
	http.Redirect(rec, httptest.NewRequest("POST", "https://console.example/login", nil), loc, http.StatusSeeOther)
	return rec.Header().Get("Location")
}

// isDotSegment: a browser reads s as "." or "..", plain or percent-encoded.
func isDotSegment(s string) bool {
	s = strings.ReplaceAll(strings.ToLower(s), "%2e", ".")
	return s == "." || s == ".."
}

// Local answers the address a browser will request, so a decision taken
// on its path (the console asks before a "next" opens an app) is taken on
// what is reached: dot segments, percent-encoded ones too, and repeated
// slashes are gone; the query stays as written.
func TestLocalNormalises(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/workloads/instance/X/./open", "/workloads/instance/X/open"},
		{"/workloads//instance/X/open", "/workloads/instance/X/open"},
		{"/workloads/instance/X/%2e/open", "/workloads/instance/X/open"},
		{"/workloads/instance/X/%2E/open", "/workloads/instance/X/open"},
		{"/workloads/instance/X/y/../open", "/workloads/instance/X/open"},
		{"/workloads/instance/X/y/%2e%2e/open", "/workloads/instance/X/open"},
		{"/workloads/instance/X/y/%2E%2e/open", "/workloads/instance/X/open"},
		{"/workloads/instance/X/y/.%2e/open", "/workloads/instance/X/open"},
		{"/workloads/instance/X/y/%2e./open", "/workloads/instance/X/open"},
		{"/workloads/instance/X/open?path=%2Fui%2F&a=b", "/workloads/instance/X/open?path=%2Fui%2F&a=b"},
		{"/workloads/instance/X/./open?path=/a/../b", "/workloads/instance/X/open?path=/a/../b"},
		{"/workloads/instance/X/./open?#top", "/workloads/instance/X/open?#top"},
		// A fragment keeps Go's redirect from cleaning it as a path.
		{"/workloads/instance/X/opex#/../open", "/workloads/instance/X/opex?#/../open"},
		{"/a/.", "/a/"},
		{"/a/b/..", "/a/"},
		{"/a/", "/a/"},
		{"/a//", "/a/"},
		{"/..", "/"},
		{"/../../a", "/a"},
		{"/%2e%2e/a", "/a"},
		{"/.", "/"},
		// Not dot segments: they stay.
		{"/a/...", "/a/..."},
		{"/a/.b", "/a/.b"},
		{"/a/%2e%2e%2e", "/a/%2e%2e%2e"},
		{"/a%2Fb/%2e%2e%2Fc", "/a%2Fb/%2e%2e%2Fc"},
		// What a browser would encode is encoded (Go's redirect would
		// trim a trailing space off the Location).
		{"/workloads/instance/X/open ", "/workloads/instance/X/open%20"},
		{"/a b/ü", "/a%20b/%C3%BC"},
		// Collapsing slashes never makes "//".
		{"/.//evil.example", "/evil.example"},
		{"/%2e//evil.example", "/evil.example"},
		{"/..//evil.example/x", "/evil.example/x"},
	} {
		if got := Local(tc.in); got != tc.want {
			t.Errorf("Local(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if h := browserHost(t, Local(tc.in)); h != "console.example" {
			t.Errorf("Local(%q) sends a browser to %s", tc.in, h)
		}
		if loc := goRedirect(Local(tc.in)); loc != Local(tc.in) {
			t.Errorf("Local(%q) = %q, which Go's redirect writes as %q", tc.in, Local(tc.in), loc)
		}
	}
}
