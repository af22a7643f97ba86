// Package inventory reads what a node is: host, container engine, NVIDIA
// driver and GPUs. It needs no cgo: GPUs come from nvidia-smi's XML and CSV
// reports; a host without nvidia-smi has zero GPUs.
package inventory

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpuaas/gpuaas/client/nodeapi"
)

// Engine is what the container engine says about itself.
type Engine struct {
	Version, APIVersion string
	Runtimes            []string
}

// Options say where to look.
type Options struct {
	DiskPath     string // the data dir; its filesystem's size is reported
	AgentVersion string
	Address      string
	Engine       func(ctx context.Context) (Engine, error) // nil: no engine
	// NVIDIA reads the driver and its GPUs (ReadNVIDIA, nvidia-smi from
	// PATH, when nil).
	NVIDIA func(ctx context.Context) (NVIDIA, error)
}

// Collect reads the inventory. Missing parts (no engine, no nvidia-smi)
// leave their fields empty; only the host part is always there.
func Collect(ctx context.Context, o Options) nodeapi.Inventory {
	inv := nodeapi.Inventory{OS: osName(), Kernel: kernel(), Arch: runtime.GOARCH, CPUCores: runtime.NumCPU(),
		MemoryMiB: memoryMiB(), DiskMiB: diskMiB(o.DiskPath), AgentVersion: o.AgentVersion, Address: o.Address, GPUs: []nodeapi.GPU{}}
	inv.Hostname, _ = os.Hostname()
	if inv.Address == "" {
		inv.Address = inv.Hostname
	}
	if o.Engine != nil {
		if e, err := o.Engine(ctx); err == nil {
			inv.DockerVersion, inv.DockerAPI = e.Version, e.APIVersion
			for _, r := range e.Runtimes {
				if r == "nvidia" {
					inv.NVIDIAContainerToolkit = true
				}
			}
		}
	}
	if !inv.NVIDIAContainerToolkit {
		for _, b := range []string{"nvidia-ctk", "nvidia-container-cli", "nvidia-container-runtime"} {
			if _, err := exec.LookPath(b); err == nil {
				inv.NVIDIAContainerToolkit = true
			}
		}
	}
	readNVIDIA := o.NVIDIA
	if readNVIDIA == nil {
		readNVIDIA = ReadNVIDIA
	}
	if n, err := readNVIDIA(ctx); err == nil {
		inv.NVIDIADriver, inv.CUDAVersion, inv.GPUs = n.Driver, n.CUDA, n.GPUs
	}
	return inv
}

// ReadNVIDIA runs nvidia-smi (from PATH). Without it the host has no GPUs.
func ReadNVIDIA(ctx context.Context) (NVIDIA, error) {
	bin, err := exec.LookPath("nvidia-smi")
	if err != nil {
		return NVIDIA{GPUs: []nodeapi.GPU{}}, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	xb, err := exec.CommandContext(ctx, bin, "-q", "-x").Output()
	if err != nil {
		return NVIDIA{GPUs: []nodeapi.GPU{}}, err
	}
	x, err := ParseSMIXML(xb)
	if err != nil {
		return NVIDIA{GPUs: []nodeapi.GPU{}}, err
	}
	if cb, err := exec.CommandContext(ctx, bin, "--query-gpu="+QueryFields, "--format=csv,noheader,nounits").Output(); err == nil {
		if c, err := ParseQueryCSV(cb); err == nil {
			x = Merge(x, c)
		}
	}
	return x, nil
}

func osName() string {
	b, err := os.ReadFile("/etc/os-release")
	if err != nil {
		return runtime.GOOS
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "PRETTY_NAME="); ok {
			return strings.Trim(v, `"`)
		}
	}
	return runtime.GOOS
}

func kernel() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func memoryMiB() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb / 1024
		}
	}
	return 0
}

func diskMiB(path string) int64 {
	if path == "" {
		path = "/"
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return 0
	}
	return int64(st.Blocks) * int64(st.Bsize) >> 20
}
