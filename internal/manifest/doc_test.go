package manifest

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/gpuaas/gpuaas/api/schemas"
)

// TestReferenceDocCoversSchema keeps docs/app-manifest.md in step with the
// schema files: every property name the schemas declare must appear in the
// reference, in backticks.
func TestReferenceDocCoversSchema(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "app-manifest.md"))
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	files, err := fs.Glob(schemas.FS, "*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no schema files: %v", err)
	}
	for _, f := range files {
		b, err := fs.ReadFile(schemas.FS, f)
		if err != nil {
			t.Fatal(err)
		}
		var tree any
		if err := json.Unmarshal(b, &tree); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		collectPropertyNames(tree, names)
	}
	var missing []string
	for n := range names {
		if !strings.Contains(string(doc), "`"+n+"`") {
			missing = append(missing, n)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("docs/app-manifest.md does not mention these schema properties: %s", strings.Join(missing, ", "))
	}
	if len(names) < 50 {
		t.Errorf("only %d property names found; is the walk broken?", len(names))
	}
}

func collectPropertyNames(node any, names map[string]bool) {
	switch n := node.(type) {
	case map[string]any:
		for k, v := range n {
			props, ok := v.(map[string]any)
			if k != "properties" || !ok {
				collectPropertyNames(v, names)
				continue
			}
			// A properties map is names to subschemas, not a schema itself.
			for name, sub := range props {
				names[name] = true
				collectPropertyNames(sub, names)
			}
		}
	case []any:
		for _, v := range n {
			collectPropertyNames(v, names)
		}
	}
}
