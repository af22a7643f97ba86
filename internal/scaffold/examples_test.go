package scaffold_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gpuaas/gpuaas/internal/scaffold"
)

// referenceApps are the reference apps under examples/: what gpuaas init
// writes for these options, committed so a team can read them without
// running anything. The smoke scripts (internal/cli/testdata/smoke) launch
// the same output on a dev node in CI.
var referenceApps = []struct {
	dir string
	o   scaffold.Options
}{
	{"jupyter-cuda-dev", scaffold.Options{Template: "jupyter", DisplayName: "Jupyter (CUDA dev)", Module: "github.com/gpuaas/gpuaas/examples/jupyter-cuda-dev"}},
	{"vllm-openai", scaffold.Options{Template: "vllm-compose", DisplayName: "vLLM (OpenAI-compatible)", Module: "github.com/gpuaas/gpuaas/examples/vllm-openai"}},
	{"cluster-app", scaffold.Options{Template: "controller", DisplayName: "Cluster (Slurm pattern)", Module: "github.com/gpuaas/gpuaas/examples/cluster-app"}},
}

// TestReferenceAppsAreTheTemplates fails when a template changes and the
// reference app written from it does not (or the other way round). To
// bring an example up to date, remove it and write it again:
//
//	rm -r examples/vllm-openai && go run ./cmd/gpuaas init examples/vllm-openai \
//	  --template vllm-compose --display-name "vLLM (OpenAI-compatible)" \
//	  --module github.com/gpuaas/gpuaas/examples/vllm-openai
func TestReferenceAppsAreTheTemplates(t *testing.T) {
	for _, ref := range referenceApps {
		t.Run(ref.dir, func(t *testing.T) {
			want := filepath.Join("..", "..", "examples", ref.dir)
			dir := filepath.Join(t.TempDir(), ref.dir)
			files, err := scaffold.Write(dir, ref.o)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range files {
				got, _ := os.ReadFile(filepath.Join(dir, f))
				have, err := os.ReadFile(filepath.Join(want, f))
				if err != nil {
					t.Errorf("examples/%s lacks %s, which the %s template writes", ref.dir, f, ref.o.Template)
					continue
				}
				if string(got) != string(have) {
					t.Errorf("examples/%s/%s differs from what the %s template writes", ref.dir, f, ref.o.Template)
				}
			}
			_ = filepath.WalkDir(want, func(p string, d fs.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					return err
				}
				rel, _ := filepath.Rel(want, p)
				if !slices.Contains(files, filepath.ToSlash(rel)) {
					t.Errorf("examples/%s/%s is not written by the %s template", ref.dir, rel, ref.o.Template)
				}
				return nil
			})
		})
	}
}
