package inventory_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/agent/inventory"
)

const fixture = "testdata/h100-80gb-hbm3"

var wantGPU = nodeapi.GPU{Index: 0, UUID: "GPU-98e5121e-2dbb-b8b3-6905-649d1ad7d6b4", Model: "NVIDIA H100 80GB HBM3", Vendor: "nvidia",
	MemoryMiB: 81559, PCIBusID: "00000000:00:06.0", MIGMode: "Disabled", ComputeCapability: "9.0"}

func read(t testing.TB, name string) []byte {
	b, err := os.ReadFile(filepath.Join(fixture, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseRealH100Reports(t *testing.T) {
	x, err := inventory.ParseSMIXML(read(t, "nvidia-smi-q.xml"))
	if err != nil {
		t.Fatal(err)
	}
	if x.Driver != "580.159.04" || x.CUDA != "13.0" || len(x.GPUs) != 1 {
		t.Fatalf("xml: %+v", x)
	}
	c, err := inventory.ParseQueryCSV(read(t, "query-gpu.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.GPUs) != 1 || c.GPUs[0] != wantGPU || c.Driver != "580.159.04" {
		t.Fatalf("csv: %+v", c)
	}
	m := inventory.Merge(x, c)
	if m.GPUs[0] != wantGPU {
		t.Fatalf("merged %+v, want %+v", m.GPUs[0], wantGPU)
	}
}

// UseFakeSMI puts the fixture-printing nvidia-smi first on PATH.
func useFakeSMI(t *testing.T) {
	dir := t.TempDir()
	abs, err := filepath.Abs("testdata/fake-nvidia-smi")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(abs, filepath.Join(dir, "nvidia-smi")); err != nil {
		t.Fatal(err)
	}
	fx, _ := filepath.Abs(fixture)
	t.Setenv("FAKE_NVIDIA_SMI_DIR", fx)
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
}

func TestCollectWithFakeNvidiaSMI(t *testing.T) {
	useFakeSMI(t)
	inv := inventory.Collect(context.Background(), inventory.Options{DiskPath: t.TempDir(), AgentVersion: "test",
		Engine: func(context.Context) (inventory.Engine, error) {
			return inventory.Engine{Version: "20.10.24", APIVersion: "1.41", Runtimes: []string{"runc", "nvidia"}}, nil
		}})
	if len(inv.GPUs) != 1 || inv.GPUs[0] != wantGPU || inv.NVIDIADriver != "580.159.04" || inv.CUDAVersion != "13.0" {
		t.Fatalf("inventory %+v", inv)
	}
	if !inv.NVIDIAContainerToolkit || inv.DockerAPI != "1.41" || inv.CPUCores < 1 || inv.MemoryMiB < 1 || inv.DiskMiB < 1 || inv.Kernel == "" {
		t.Fatalf("host part %+v", inv)
	}
}

func TestCollectWithoutNvidiaSMI(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	inv := inventory.Collect(context.Background(), inventory.Options{})
	if inv.GPUs == nil || len(inv.GPUs) != 0 || inv.NVIDIADriver != "" {
		t.Fatalf("inventory %+v", inv)
	}
}

// An injected reader replaces nvidia-smi (in-process test agents).
func TestCollectWithInjectedNVIDIA(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	inv := inventory.Collect(context.Background(), inventory.Options{NVIDIA: func(context.Context) (inventory.NVIDIA, error) {
		return inventory.NVIDIA{Driver: "580.159.04", CUDA: "13.0", GPUs: []nodeapi.GPU{wantGPU}}, nil
	}})
	if len(inv.GPUs) != 1 || inv.GPUs[0] != wantGPU || inv.NVIDIADriver != "580.159.04" || inv.CUDAVersion != "13.0" {
		t.Fatalf("inventory %+v", inv)
	}
}

func FuzzParseSMIXML(f *testing.F) {
	f.Add(read(f, "nvidia-smi-q.xml"))
	f.Add([]byte("<nvidia_smi_log><gpu><fb_memory_usage><total>x MiB</total></fb_memory_usage></gpu></nvidia_smi_log>"))
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := inventory.ParseSMIXML(b)
		if err == nil && len(n.GPUs) > 64 {
			t.Fatalf("%d GPUs accepted", len(n.GPUs))
		}
	})
}

func FuzzParseQueryCSV(f *testing.F) {
	f.Add(read(f, "query-gpu.csv"))
	f.Add([]byte("0, a, b, c, 1, 0, d, Enabled, [N/A]\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := inventory.ParseQueryCSV(b)
		if err == nil {
			for _, g := range n.GPUs {
				if g.MemoryMiB < 0 || g.Index < 0 {
					t.Fatalf("accepted %+v", g)
				}
			}
		}
	})
}
