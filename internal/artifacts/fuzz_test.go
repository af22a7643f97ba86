package artifacts

import (
	"strings"
	"testing"
)

func FuzzParseImageRef(f *testing.F) {
	for _, s := range []string{
		"127.0.0.1:5000/gpuaas/apps/o/p/a:1.0.0",
		"registry.example.com/gpuaas/apps/o/p/a@sha256:" + strings.Repeat("a", 64),
		"localhost/x:y@sha256:" + strings.Repeat("0", 64),
		"nohost/x", "a.b/../x", "a.b/X", "a.b/x:", ":1/x", "a.b/x@sha256:ABC",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseImageRef(s)
		if err != nil {
			return
		}
		if r.String() != s {
			t.Fatalf("round trip %q -> %q", s, r.String())
		}
		if !ValidRepository(r.Repository) || (r.Tag != "" && !ValidTag(r.Tag)) || strings.Contains(r.Repository, "..") {
			t.Fatalf("accepted a bad reference %q: %+v", s, r)
		}
		if r.Digest != "" {
			if _, err := ParseDigest(r.Digest); err != nil {
				t.Fatalf("accepted a bad digest in %q", s)
			}
		}
	})
}

func FuzzParseDigest(f *testing.F) {
	for _, s := range []string{"sha256:" + strings.Repeat("a", 64), "sha256:" + strings.Repeat("A", 64), "sha512:00", "", "sha256:"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDigest(s)
		if err != nil {
			return
		}
		if d != s || len(d) != 71 || !strings.HasPrefix(d, "sha256:") || strings.ToLower(d) != d {
			t.Fatalf("accepted %q", s)
		}
	})
}

func TestLifecycleGraph(t *testing.T) {
	path := []LifecycleState{StateDraft, StateStaged, StateCanary, StateActive, StateDeprecated, StateRetired}
	for i := 0; i+1 < len(path); i++ {
		if !CanTransition(path[i], path[i+1]) {
			t.Fatalf("%s -> %s refused", path[i], path[i+1])
		}
	}
	if !CanTransition(StateCanary, StateStaged) || CanTransition(StateDraft, StateActive) || CanTransition(StateActive, StateStaged) || len(NextStates(StateRetired)) != 0 {
		t.Fatal("lifecycle graph is wrong")
	}
	if CanonicalRepository("o", "p", "a") != "gpuaas/apps/o/p/a" || !ValidRepository(CanonicalRepository("org-1", "proj", "app")) {
		t.Fatal("canonical repository")
	}
}
