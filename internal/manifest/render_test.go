package manifest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const digestA = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

const nestedManifest = `# top comment
app:
  slug: demo
  display_name: Demo
  runtime_backend: launchable_oci
version:
  version: 0.1.0 # bumped by CI
  runtime_backend: launchable_oci
  runtime_profile:
    kind: launchable_oci
    image_ref: registry.example/demo@sha256:0000000000000000000000000000000000000000000000000000000000000000
    resources:
      gpu_count: {default: 0, min: 0, max: 2}
  metering: {kind: session_seconds}
`

func mustSettings(t *testing.T, kv ...string) []Setting {
	t.Helper()
	var out []Setting
	for _, s := range kv {
		st, err := ParseSetting(s)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, st)
	}
	return out
}

func TestRenderSetsTheShortNamesInTheNestedForm(t *testing.T) {
	if _, problems, _ := Parse([]byte(nestedManifest), "m.yaml"); len(problems) > 0 {
		t.Fatalf("the input must be valid as it is: %v", problems)
	}
	out, err := Render([]byte(nestedManifest), "m.yaml", mustSettings(t,
		"version=1.10", "image_ref=localhost:5000/p/demo@"+digestA, "version.runtime_profile.resources.gpu_count.default=1"))
	if err != nil {
		t.Fatal(err)
	}
	pkg, problems, err := Parse(out, "m.yaml")
	if err != nil || len(problems) > 0 {
		t.Fatalf("rendered manifest invalid: %v %v\n%s", err, problems, out)
	}
	v := pkg.Versions[0]
	if v.Version != "1.10" { // text, not the number 1.1
		t.Errorf("version = %q", v.Version)
	}
	raw, err := json.Marshal(v.RuntimeProfile)
	if err != nil {
		t.Fatal(err)
	}
	var prof struct {
		ImageRef  string `json:"image_ref"`
		Resources struct {
			GPUCount struct {
				Default int `json:"default"`
			} `json:"gpu_count"`
		} `json:"resources"`
	}
	if err := json.Unmarshal(raw, &prof); err != nil {
		t.Fatal(err)
	}
	if prof.ImageRef != "localhost:5000/p/demo@"+digestA || prof.Resources.GPUCount.Default != 1 {
		t.Errorf("profile = %s", raw)
	}
	for _, keep := range []string{"# top comment", "# bumped by CI"} {
		if !strings.Contains(string(out), keep) {
			t.Errorf("comment %q lost:\n%s", keep, out)
		}
	}
}

func TestRenderFlatFormAndOneItemList(t *testing.T) {
	flat := "slug: demo\ndisplay_name: Demo\nversion: 0.1.0\nruntime_backend: launchable_oci\nruntime_profile: {kind: launchable_oci, image_ref: r.example/demo@" + digestA + "}\n"
	out, err := Render([]byte(flat), "f.yaml", mustSettings(t, "version=2.0.0", "image_ref=r.example/other@"+digestA))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "version: 2.0.0") || !strings.Contains(string(out), "r.example/other@") {
		t.Errorf("flat form not rendered:\n%s", out)
	}
	list := strings.Replace(nestedManifest, "version:\n  version: 0.1.0", "versions:\n- version: 0.1.0", 1)
	list = strings.ReplaceAll(list, "\n  runtime_backend: launchable_oci\n  runtime_profile", "\n  runtime_backend: launchable_oci\n  runtime_profile")
	out, err = Render([]byte(list), "l.yaml", mustSettings(t, "version=3.0.0"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "version: 3.0.0") {
		t.Errorf("one-item list not rendered:\n%s", out)
	}
}

func TestRenderRefusesWhatItCannotPlace(t *testing.T) {
	two := "app: {slug: demo, display_name: Demo, runtime_backend: launchable_oci}\nversions:\n- {version: 1.0.0}\n- {version: 2.0.0}\n"
	compose := "app: {slug: demo, display_name: Demo, runtime_backend: compose}\nversion: {version: 1.0.0}\n"
	for _, c := range []struct{ doc, set, want string }{
		{two, "version=3.0.0", "several versions; name one, e.g. versions.0.version"},
		{compose, "image_ref=r.example/x@" + digestA, "has no version.runtime_profile.image_ref"},
		{nestedManifest, "app.slug.x=1", "app.slug is a single value"},
		{nestedManifest, "version.runtime_profile.resources.gpu_count.default.0=1", "single value"},
		{two, "versions.5.version=1.0.0", "a list of 2; \"5\" is not an index"},
		{nestedManifest, "version..x=1", "empty field name"},
		{"- a\n- b\n", "version=1.0.0", "not a mapping of fields"},
	} {
		_, err := Render([]byte(c.doc), "m.yaml", mustSettings(t, c.set))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--set %s: err = %v, want it to say %q", c.set, err, c.want)
		}
	}
	for _, bad := range []string{"version", "=1.0", " =x"} {
		if _, err := ParseSetting(bad); err == nil {
			t.Errorf("ParseSetting(%q) accepted", bad)
		}
	}
}

func TestRenderSetsAnArtifactByName(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "examples", "manifests", "vllm-openai-compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := Render(data, "v.yaml", mustSettings(t, "artifact.metrics-sidecar=apps/other/side@"+digestA))
	if err != nil {
		t.Fatal(err)
	}
	pkg, problems, err := Parse(out, "v.yaml")
	if err != nil || len(problems) > 0 {
		t.Fatalf("rendered manifest invalid: %v %v", err, problems)
	}
	arts := pkg.Versions[0].Artifacts
	if arts[1].Name != "metrics-sidecar" || arts[1].Repository != "apps/other/side" || arts[1].Digest != digestA {
		t.Errorf("sidecar = %+v", arts[1])
	}
	if arts[0].Repository != "apps/vllm-openai/vllm" || arts[0].Digest == digestA {
		t.Errorf("the other artifact changed: %+v", arts[0])
	}
	for _, c := range []struct{ doc, set, want string }{
		{string(data), "artifact.nope=apps/x@" + digestA, `no artifact named "nope"; the version's artifacts are: vllm, metrics-sidecar`},
		{string(data), "artifact.vllm=apps/x:latest", "want REPOSITORY@sha256:"},
		{nestedManifest, "artifact.runtime=apps/x@" + digestA, "lists no artifacts"},
	} {
		if _, err := Render([]byte(c.doc), "m.yaml", mustSettings(t, c.set)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--set %s: err = %v, want it to say %q", c.set, err, c.want)
		}
	}
}

func TestRenderKeepsJSONAsJSON(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "examples", "manifests", "jupyter-cuda-dev.json"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := Render(data, "j.json", mustSettings(t, "display_name=Renamed", "version=9.9.9"))
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("not JSON any more: %v\n%s", err, out)
	}
	if _, problems, _ := Parse(out, "j.json"); len(problems) > 0 {
		t.Fatalf("rendered JSON invalid: %v", problems)
	}
	if !strings.Contains(string(out), `"display_name": "Renamed"`) || !strings.Contains(string(out), `"version": "9.9.9"`) {
		t.Errorf("display name or version not set:\n%s", out)
	}
	if strings.Index(string(out), `"slug"`) > strings.Index(string(out), `"runtime_profile"`) {
		t.Errorf("key order not kept:\n%s", out)
	}
}

// FuzzRender: any bytes and any setting either render or give an error,
// never a panic.
func FuzzRender(f *testing.F) {
	f.Add([]byte(nestedManifest), "version.runtime_profile.args", "[a, b]")
	f.Add([]byte("{}"), "a.0.b", "1")
	f.Add([]byte("a: [1]"), "a.0", "{x: y}")
	f.Fuzz(func(t *testing.T, data []byte, key, value string) {
		_, _ = Render(data, "fuzz.yaml", []Setting{{Key: key, Value: value}})
	})
}

// TestRenderRefusesAliasesInJSONOutput checks that writing JSON does not
// expand YAML aliases, which Parse refuses anyway: six short lines of
// nested aliases rendered to 24 MB (tenfold per line), and an alias inside
// its own anchor overflowed the stack and killed the process.
func TestRenderRefusesAliasesInJSONOutput(t *testing.T) {
	t.Parallel()
	for _, src := range []string{
		"a: &a [1, *a]\n",
		"a: &a [x, x, x]\nb: &b [*a, *a, *a]\nc: [*b, *b, *b]\n",
	} {
		out, err := Render([]byte(src), "m.json", nil)
		if err == nil || !strings.Contains(err.Error(), "aliases are not accepted") {
			t.Errorf("%q: rendered %d bytes, err %v", src, len(out), err)
		}
	}
}
