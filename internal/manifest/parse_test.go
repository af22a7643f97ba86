package manifest

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

func readExample(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "examples", "manifests", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func mustParse(t *testing.T, data []byte, name string) *Package {
	t.Helper()
	pkg, problems, err := Parse(data, name)
	if err != nil {
		t.Fatalf("Parse(%s): %v", name, err)
	}
	if len(problems) > 0 {
		t.Fatalf("Parse(%s) problems:\n%s", name, formatProblems(problems))
	}
	return pkg
}

func TestExamplesValidate(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"jupyter-cuda-dev.json", "slurm-reference.yaml", "vllm-openai-compose.yaml"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			pkg := mustParse(t, readExample(t, name), name)
			if len(pkg.Versions) == 0 || pkg.App.Slug == "" {
				t.Fatalf("empty package: %+v", pkg)
			}
			for _, v := range pkg.Versions {
				if v.RuntimeBackend == "" || len(v.SupportedModes.OperatingModes) == 0 || len(v.SupportedModes.ControlPlaneScopes) == 0 {
					t.Errorf("version %s not normalised: %+v", v.Version, v)
				}
			}
		})
	}
}

func TestJupyterNormalisation(t *testing.T) {
	t.Parallel()
	pkg := mustParse(t, readExample(t, "jupyter-cuda-dev.json"), "jupyter-cuda-dev.json")
	v := pkg.Versions[0]
	if pkg.App.RuntimeBackend != BackendLaunchableOCI || v.RuntimeBackend != BackendLaunchableOCI {
		t.Errorf("backend: app %q version %q", pkg.App.RuntimeBackend, v.RuntimeBackend)
	}
	r := v.RuntimeProfile.Resources
	if r.MinMemoryMiB != 0 || r.MinVCPU != 0 {
		t.Errorf("seed resource fields not folded: %+v", r)
	}
	if *r.MemoryGiB.Min != 4 || *r.CPUCores.Min != 4 {
		t.Errorf("folded minimums: memory %d cpu %d", *r.MemoryGiB.Min, *r.CPUCores.Min)
	}
	if v.UI == nil || v.UI.Path != "/lab" {
		t.Errorf("flat-form ui not carried to the version: %+v", v.UI)
	}
}

// TestRunValidate pins the output format the CLI prints.
func TestRunValidate(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	path := filepath.Join("testdata", "invalid", "bad-slug.json")
	ok, err := RunValidate(&out, path)
	if err != nil || ok {
		t.Fatalf("ok=%v err=%v", ok, err)
	}
	want := path + ":2: /slug: slug must start"
	if !strings.HasPrefix(out.String(), want) {
		t.Errorf("output %q does not start with %q", out.String(), want)
	}
	out.Reset()
	ok, err = RunValidate(&out, filepath.Join("..", "..", "examples", "manifests", "slurm-reference.yaml"))
	if err != nil || !ok {
		t.Fatalf("ok=%v err=%v out=%s", ok, err, out.String())
	}
	if !strings.Contains(out.String(), "slurm-reference 24.05.0 (slurm) sha256:") {
		t.Errorf("summary: %q", out.String())
	}
	if _, err := RunValidate(&out, filepath.Join("testdata", "does-not-exist.yaml")); err == nil {
		t.Error("missing file: want error")
	}
}

// TestDigestIgnoresSpelling checks that the same body written as YAML or
// JSON, with keys in another order, digests the same, and that a changed
// body does not.
func TestDigestIgnoresSpelling(t *testing.T) {
	t.Parallel()
	yamlSrc := readExample(t, "slurm-reference.yaml")
	var tree any
	if err := yaml.Unmarshal(yamlSrc, &tree); err != nil {
		t.Fatal(err)
	}
	jsonSrc, err := json.MarshalIndent(tree, "", "\t") // json sorts keys: a different order
	if err != nil {
		t.Fatal(err)
	}
	a := mustParse(t, yamlSrc, "slurm.yaml").Versions[0]
	b := mustParse(t, jsonSrc, "slurm.json").Versions[0]
	da, _ := a.Digest()
	db, _ := b.Digest()
	if da != db {
		t.Fatalf("digest differs between YAML and JSON: %s vs %s", da, db)
	}
	changed := bytes.Replace(yamlSrc, []byte("partition_name"), []byte("partition"), 1)
	dc, _ := mustParse(t, changed, "slurm.yaml").Versions[0].Digest()
	if dc == da {
		t.Fatal("changed body kept the same digest")
	}
}

// TestFlatAndNestedAgree checks that the flat SDK form and the nested form
// of the same app normalise to the same version body.
func TestFlatAndNestedAgree(t *testing.T) {
	t.Parallel()
	const digest = "sha256:4bd939d111347ea5cb8026a7c98532834c3ddd10cb645fc8144e9b1a2e6e15ac"
	flat := `{"slug":"nb","display_name":"NB","version":"1.0.0",
	  "runtime_profile":{"kind":"launchable_oci","image_ref":"r.example.com/a/nb@` + digest + `",
	  "resources":{"min_memory_mib":2048}},"ui":{"extension_kind":"metadata_only"}}`
	nested := `
app:
  slug: nb
  display_name: NB
  runtime_backend: launchable_oci
  ui: {extension_kind: metadata_only}
versions:
  - version: 1.0.0
    runtime_profile:
      kind: launchable_oci
      image_ref: r.example.com/a/nb@` + digest + `
      resources: {memory_gib: {min: 2}}
`
	a, _ := mustParse(t, []byte(flat), "a.json").Versions[0].Digest()
	b, _ := mustParse(t, []byte(nested), "b.yaml").Versions[0].Digest()
	if a != b {
		t.Fatalf("flat %s != nested %s", a, b)
	}
}

func TestSplitDigestRef(t *testing.T) {
	t.Parallel()
	const d = "sha256:4bd939d111347ea5cb8026a7c98532834c3ddd10cb645fc8144e9b1a2e6e15ac"
	for ref, ok := range map[string]bool{
		"registry.example.com/apps/x@" + d:      true,
		"localhost:5000/x@" + d:                 true,
		"registry.example.com/apps/x:1.0@" + d:  false, // no tags, even beside a digest
		"registry.example.com/apps/x:latest":    false,
		"x@" + d:                                false, // no registry
		"registry.example.com/apps/x@sha256:AB": false,
		"Registry.example.com/apps/x@" + d:      false,
	} {
		if _, _, got := SplitDigestRef(ref); got != ok {
			t.Errorf("SplitDigestRef(%q) = %v, want %v", ref, got, ok)
		}
	}
}

// TestIntegralNumbersInAnySpelling checks that the integer spellings JSON
// Schema accepts (8080.0, 8.08e3) reach the Go int fields: Parse once
// returned neither a package nor a problem for them, and registration then
// dereferenced the nil package. They digest as the plain spelling does.
func TestIntegralNumbersInAnySpelling(t *testing.T) {
	t.Parallel()
	const src = `{"slug":"nb","display_name":"NB","version":"1.0.0",
	  "runtime_profile":{"kind":"launchable_oci",
	  "image_ref":"r.example.com/a/nb@sha256:4bd939d111347ea5cb8026a7c98532834c3ddd10cb645fc8144e9b1a2e6e15ac",
	  "ports":[{"container":PORT,"expose":"none"}]}}`
	want, _ := mustParse(t, []byte(strings.Replace(src, "PORT", "8080", 1)), "a.json").Versions[0].Digest()
	for _, port := range []string{"8080.0", "8.08e3", "80800e-1"} {
		pkg := mustParse(t, []byte(strings.Replace(src, "PORT", port, 1)), "a.json")
		if got := pkg.Versions[0].RuntimeProfile.Ports[0].Container; got != 8080 {
			t.Errorf("%s: container port %d", port, got)
		}
		if d, _ := pkg.Versions[0].Digest(); d != want {
			t.Errorf("%s: digest %s, want %s", port, d, want)
		}
	}
	// YAML writes a float of 1e6 or more with an exponent (1.6e+07).
	pkg := mustParse(t, []byte(`slug: nb
display_name: NB
version: 1.0.0
runtime_profile:
  kind: launchable_oci
  image_ref: r.example.com/a/nb@sha256:4bd939d111347ea5cb8026a7c98532834c3ddd10cb645fc8144e9b1a2e6e15ac
  resources: {min_memory_mib: 1.6e7}
`), "a.yaml")
	if got := *pkg.Versions[0].RuntimeProfile.Resources.MemoryGiB.Min; got != 15625 {
		t.Errorf("min_memory_mib 1.6e7 folded to %d GiB", got)
	}
}

// TestBuildReportsUndecodableTree checks the backstop behind the schema:
// a tree the Go types cannot hold is a problem, never a silent nil.
func TestBuildReportsUndecodableTree(t *testing.T) {
	t.Parallel()
	pkg, problems := build(map[string]any{"slug": "nb", "display_name": "NB", "version": "1.0.0",
		"runtime_profile": map[string]any{"kind": "launchable_oci", "ports": []any{map[string]any{"container": json.Number("8080.5")}}}})
	if pkg != nil || len(problems) != 1 || !strings.Contains(problems[0].Message, "cannot be read") {
		t.Fatalf("pkg=%v problems=%v", pkg != nil, problems)
	}
}

// TestVerbatimMembersKeepTheirSpelling checks that the documents digested
// as written (JSON Schemas, parameter documents) keep 0.0 as 0.0: spelled
// anew, a version registered before would digest differently, and the same
// file submitted again would be refused as a change to a published version.
func TestVerbatimMembersKeepTheirSpelling(t *testing.T) {
	t.Parallel()
	pkg := mustParse(t, []byte(`{"slug":"nb","display_name":"NB","version":"1.0.0",
	  "config_schema":{"type":"object","properties":{"t":{"type":"number","minimum":0.0,"maximum":2.0}}},
	  "runtime_profile":{"kind":"launchable_oci",
	  "image_ref":"r.example.com/a/nb@sha256:4bd939d111347ea5cb8026a7c98532834c3ddd10cb645fc8144e9b1a2e6e15ac",
	  "ports":[{"container":8080.0,"expose":"none"}],
	  "parameters":{"type":"object","properties":{"lr":{"type":"number","default":1.0}}}}}`), "a.json")
	v := pkg.Versions[0]
	if !strings.Contains(string(v.ConfigSchema), `"minimum":0.0`) || !strings.Contains(string(v.ConfigSchema), `"maximum":2.0`) {
		t.Errorf("config_schema respelt: %s", v.ConfigSchema)
	}
	if !strings.Contains(string(v.RuntimeProfile.Parameters), `"default":1.0`) {
		t.Errorf("parameters respelt: %s", v.RuntimeProfile.Parameters)
	}
	if v.RuntimeProfile.Ports[0].Container != 8080 {
		t.Errorf("container port %d", v.RuntimeProfile.Ports[0].Container)
	}
}
