package redirect

import (
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
	for _, s := range []string{"/", "//x", "/\\x", "/\t/x", "/a/b?c#d", "http://x", "/%09/x", "/\u3000/x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		got := Local(p)
		if h := browserHost(t, got); h != "console.example" {
			t.Fatalf("Local(%q) = %q: a browser goes to %q", p, got, h)
		}
		if got != "/" && got != p {
			t.Fatalf("Local(%q) = %q: a local path goes unchanged", p, got)
		}
	})
}
