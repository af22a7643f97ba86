package manifest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestInvalidCorpus checks that each broken manifest is refused with a
// problem at the expected pointer and source line. Every file in
// testdata/invalid must appear in the table, so the corpus cannot grow
// untested.
func TestInvalidCorpus(t *testing.T) {
	t.Parallel()
	cases := []struct {
		file     string
		pointer  string
		line     int
		contains string
	}{
		{"tag-instead-of-digest.json", "/runtime_profile/image_ref", 7, "pinned by digest"},
		{"env-visible-devices.json", "/runtime_profile/env/1/name", 10, "set by the platform"},
		{"artifact-ref-tag.json", "/artifact_ref", 6, "pinned by digest"},
		{"unknown-runtime-kind.yaml", "/versions/0/runtime_profile/kind", 8, "launchable_oci"},
		{"gpu-bounds-reversed.yaml", "/version/runtime_profile/resources/gpu_count", 11, "reversed"},
		{"default-above-max.yaml", "/version/runtime_profile/resources/memory_gib/default", 11, "above max 64"},
		{"default-above-max.yaml", "/version/runtime_profile/resources/host_port/default", 12, "at least 1024"},
		{"min-memory-mib-conflict.json", "/runtime_profile/resources/min_memory_mib", 8, "16 GiB"},
		{"bad-slug.json", "/slug", 2, "lowercase letter"},
		{"raw-compose.yaml", "/version/runtime_profile/compose_yaml", 20, "raw Compose"},
		{"compose-service-image.yaml", "/version/runtime_profile/topology/services/0/image", 15, "unknown property \"image\""},
		{"compose-unknown-artifact.yaml", "/version/runtime_profile/topology/services/0/artifact", 14, "not declared"},
		{"compose-unknown-artifact.yaml", "/version/runtime_profile/topology/endpoints/0/service", 17, "\"api\""},
		{"unknown-renderer.yaml", "/version/runtime_profile/renderer", 9, "vllm_openai"},
		{"config-schema-not-schema.yaml", "/version/config_schema/type", 8, "not a valid JSON Schema"},
		{"parameters-not-schema.json", "/runtime_profile/parameters/properties/pip_packages/type", 11, "not a valid JSON Schema"},
		{"placement-remote-ref.yaml", "/version/placement_schema", 7, "not allowed"},
		{"duplicate-versions.yaml", "/versions/2/version", 8, "declared twice"},
		{"duplicate-artifacts.yaml", "/version/artifacts/1/name", 12, "used twice"},
		{"missing-version.yaml", "", 1, "no version"},
		{"version-and-versions.yaml", "", 1, "not both"},
		{"version-as-number.yaml", "/version/version", 6, "quote it"},
		{"embedded-ui-without-path.json", "/ui", 10, "path"},
		{"backend-profile-mismatch.yaml", "/version/runtime_profile/kind", 8, "does not match runtime_backend"},
		{"duplicate-key.yaml", "/app/slug", 5, "duplicate key"},
		{"duplicate-key.json", "/slug", 4, "duplicate key"},
		{"yaml-alias.yaml", "/version/extra", 7, "aliases"},
		{"yaml-syntax.yaml", "", 2, "invalid YAML"},
		{"json-syntax.json", "", 5, "invalid JSON"},
		// The schema validator reads numbers as big.Rat and crashed on one
		// it cannot hold.
		{"number-out-of-range.json", "/runtime_profile/parameters/properties/lr/multipleOf", 9, "out of range"},
	}
	covered := map[string]bool{}
	for _, tc := range cases {
		covered[tc.file] = true
		t.Run(tc.file+tc.pointer, func(t *testing.T) {
			t.Parallel()
			data, err := os.ReadFile(filepath.Join("testdata", "invalid", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			pkg, problems, err := Parse(data, tc.file)
			if err != nil {
				t.Fatalf("Parse error: %v", err)
			}
			if pkg != nil {
				t.Fatalf("Parse accepted an invalid manifest")
			}
			for _, p := range problems {
				if p.Pointer == tc.pointer && p.Line == tc.line && strings.Contains(p.Message, tc.contains) {
					return
				}
			}
			t.Errorf("want problem at %q line %d containing %q; got:\n%s", tc.pointer, tc.line, tc.contains, formatProblems(problems))
		})
	}
	files, err := filepath.Glob(filepath.Join("testdata", "invalid", "*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if !covered[filepath.Base(f)] {
			t.Errorf("%s has no expectation in the table", f)
		}
	}
}

func formatProblems(ps []Problem) string {
	var b strings.Builder
	for _, p := range ps {
		b.WriteString("  " + p.String() + "\n")
	}
	return b.String()
}

// Launch values missing a required property get one problem per missing
// property at its own pointer, so a form shows each beside its field; a
// manifest keeps one problem at the object, the line an editor shows.
func TestMissingRequiredLaunchValuesPointAtTheProperty(t *testing.T) {
	sch, err := CompileSchema(json.RawMessage(`{"type":"object","required":["model","max_len"],"properties":{"model":{"type":"string"},"max_len":{"type":"integer"},"a/b":{"type":"object","required":["c"]}}}`))
	if err != nil {
		t.Fatal(err)
	}
	err = sch.Validate(map[string]any{"a/b": map[string]any{}})
	if err == nil {
		t.Fatal("values missing required properties passed")
	}
	got := map[string]string{}
	for _, p := range SchemaErrorProblems(err, "/parameters") {
		got[p.Pointer] = p.Message
	}
	want := map[string]string{"/parameters/model": "is required", "/parameters/max_len": "is required", "/parameters/a~1b/c": "is required"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("problems %v, want %v", got, want)
	}
}
