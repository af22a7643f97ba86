package manifest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParse feeds arbitrary bytes to Parse: it must never panic or fail
// internally, and every problem must carry a valid JSON pointer.
func FuzzParse(f *testing.F) {
	for _, dir := range []string{filepath.Join("..", "..", "examples", "manifests"), filepath.Join("testdata", "invalid")} {
		files, _ := filepath.Glob(filepath.Join(dir, "*"))
		for _, file := range files {
			if data, err := os.ReadFile(file); err == nil {
				f.Add(data, filepath.Ext(file))
			}
		}
	}
	f.Add([]byte("{}"), ".json")
	f.Add([]byte("app: {slug: a}\nversions: [{version: 1.0}]"), ".yaml")
	f.Fuzz(func(t *testing.T, data []byte, ext string) {
		pkg, problems, err := Parse(data, "fuzz"+ext)
		if err != nil {
			t.Fatalf("internal error: %v", err)
		}
		if (pkg == nil) == (len(problems) == 0) {
			t.Fatalf("want exactly one of package and problems; got pkg=%v problems=%d", pkg != nil, len(problems))
		}
		for _, p := range problems {
			if p.Pointer != "" && !strings.HasPrefix(p.Pointer, "/") {
				t.Fatalf("bad pointer %q in %v", p.Pointer, p)
			}
			if p.Message == "" || p.Line < 0 {
				t.Fatalf("bad problem %+v", p)
			}
		}
		if pkg != nil {
			for _, v := range pkg.Versions {
				if _, err := v.Digest(); err != nil {
					t.Fatalf("digest: %v", err)
				}
			}
		}
	})
}
