package inventory

import (
	"bytes"
	"encoding/csv"
	"encoding/xml"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/gpuaas/gpuaas/client/nodeapi"
)

// NVIDIA is what the driver reports: versions and GPUs.
type NVIDIA struct {
	Driver string
	CUDA   string
	GPUs   []nodeapi.GPU
}

// maxGPUs bounds what a parser accepts from one report.
const maxGPUs = 64

type smiLog struct {
	Driver string   `xml:"driver_version"`
	CUDA   string   `xml:"cuda_version"`
	GPUs   []smiGPU `xml:"gpu"`
}

type smiGPU struct {
	ID          string `xml:"id,attr"`
	ProductName string `xml:"product_name"`
	UUID        string `xml:"uuid"`
	MinorNumber string `xml:"minor_number"`
	MIG         struct {
		Current string `xml:"current_mig"`
	} `xml:"mig_mode"`
	PCI struct {
		BusID string `xml:"pci_bus_id"`
	} `xml:"pci"`
	FB struct {
		Total string `xml:"total"`
	} `xml:"fb_memory_usage"`
}

// ParseSMIXML parses `nvidia-smi -q -x`. GPUs get their position as index
// (nvidia-smi lists them in index order); compute capability is not in this
// report (see ParseQueryCSV).
func ParseSMIXML(data []byte) (NVIDIA, error) {
	var l smiLog
	dec := xml.NewDecoder(bytes.NewReader(data))
	dec.Entity = xml.HTMLEntity
	if err := dec.Decode(&l); err != nil {
		return NVIDIA{}, fmt.Errorf("nvidia-smi -q -x: %w", err)
	}
	if len(l.GPUs) > maxGPUs {
		return NVIDIA{}, fmt.Errorf("nvidia-smi reports %d GPUs, more than %d", len(l.GPUs), maxGPUs)
	}
	out := NVIDIA{Driver: strings.TrimSpace(l.Driver), CUDA: strings.TrimSpace(l.CUDA), GPUs: []nodeapi.GPU{}}
	for i, g := range l.GPUs {
		mem, err := mib(g.FB.Total)
		if err != nil {
			return NVIDIA{}, fmt.Errorf("gpu %d memory: %w", i, err)
		}
		bus := strings.TrimSpace(g.PCI.BusID)
		if bus == "" {
			bus = g.ID
		}
		out.GPUs = append(out.GPUs, nodeapi.GPU{Index: i, UUID: strings.TrimSpace(g.UUID), Model: strings.TrimSpace(g.ProductName), Vendor: "nvidia",
			MemoryMiB: mem, PCIBusID: bus, MIGMode: migMode(g.MIG.Current)})
	}
	return out, nil
}

func mib(s string) (int64, error) {
	s = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(s), "MiB"))
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > 1<<40 {
		return 0, fmt.Errorf("%q is not a memory size in MiB", s)
	}
	return n, nil
}

func migMode(s string) string {
	switch s = strings.TrimSpace(s); s {
	case "Enabled", "Disabled":
		return s
	}
	return "N/A"
}

// QueryFields is the --query-gpu field list ParseQueryCSV expects.
const QueryFields = "index,uuid,name,pci.bus_id,memory.total,memory.used,driver_version,mig.mode.current,compute_cap,power.limit,temperature.gpu,utilization.gpu"

// ParseQueryCSV parses `nvidia-smi --query-gpu=QueryFields
// --format=csv,noheader,nounits`.
func ParseQueryCSV(data []byte) (NVIDIA, error) {
	r := csv.NewReader(bytes.NewReader(data))
	r.TrimLeadingSpace = true
	r.FieldsPerRecord = -1
	out := NVIDIA{GPUs: []nodeapi.GPU{}}
	for {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return NVIDIA{}, fmt.Errorf("nvidia-smi --query-gpu: %w", err)
		}
		if len(rec) < 9 {
			return NVIDIA{}, fmt.Errorf("nvidia-smi --query-gpu: %d fields, want at least 9", len(rec))
		}
		if len(out.GPUs) >= maxGPUs {
			return NVIDIA{}, fmt.Errorf("nvidia-smi reports more than %d GPUs", maxGPUs)
		}
		idx, err := strconv.Atoi(strings.TrimSpace(rec[0]))
		if err != nil || idx < 0 || idx >= 1024 {
			return NVIDIA{}, fmt.Errorf("gpu index %q", rec[0])
		}
		mem, err := mib(rec[4])
		if err != nil {
			return NVIDIA{}, err
		}
		cc := strings.TrimSpace(rec[8])
		if cc == "[N/A]" || cc == "N/A" {
			cc = ""
		}
		out.Driver = strings.TrimSpace(rec[6])
		out.GPUs = append(out.GPUs, nodeapi.GPU{Index: idx, UUID: strings.TrimSpace(rec[1]), Model: strings.TrimSpace(rec[2]), Vendor: "nvidia",
			PCIBusID: strings.TrimSpace(rec[3]), MemoryMiB: mem, MIGMode: migMode(rec[7]), ComputeCapability: cc})
	}
	return out, nil
}

// Merge takes driver, CUDA and GPUs from the XML report and fills each GPU's
// compute capability (and index) from the CSV report by UUID.
func Merge(x, c NVIDIA) NVIDIA {
	byUUID := map[string]nodeapi.GPU{}
	for _, g := range c.GPUs {
		byUUID[g.UUID] = g
	}
	for i, g := range x.GPUs {
		if cg, ok := byUUID[g.UUID]; ok {
			x.GPUs[i].ComputeCapability = cg.ComputeCapability
			x.GPUs[i].Index = cg.Index
		}
	}
	if x.Driver == "" {
		x.Driver = c.Driver
	}
	return x
}
