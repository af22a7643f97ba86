package catalog

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzResolveLaunch feeds arbitrary launch-preview bodies (untrusted input
// from any project operator) through the same decoding as the API and then
// ResolveLaunch: it must never panic, and an accepted launch must respect
// the profile's bounds.
func FuzzResolveLaunch(f *testing.F) {
	for _, seed := range []string{
		`{}`,
		`{"resources":{"gpu_count":2,"cpu_cores":8,"memory_gib":64,"host_port":18080}}`,
		`{"operating_mode":"platform_managed","control_plane_scope":"platform"}`,
		`{"parameters":{"pip_packages":["numpy>=1.26","torch==2.3.*; python_version>'3.8'"]}}`,
		`{"parameters":{"pip_packages":["https://x/y.whl","a[b,c]@file:///"]},"config":{"idle_shutdown_minutes":-1}}`,
		`{"placement_intent":{"controller_allocation_ids":["a"]},"config":{"partition_name":"gpu"}}`,
		`{"resources":{"gpu_count":-1,"host_port":99999999999}}`,
	} {
		f.Add([]byte(seed))
	}
	jupyter := exampleVersion(f, "jupyter-cuda-dev.json")
	slurm := exampleVersion(f, "slurm-reference.yaml")
	overrides := []EntitlementOverrides{{}, {AllowedVersions: []string{"1.4.2"}, AllowedControlPlaneScopes: []string{"project"}}}
	f.Fuzz(func(t *testing.T, body []byte) {
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		var req LaunchRequest
		if dec.Decode(&req) != nil {
			return
		}
		for _, o := range overrides {
			eff, errs := ResolveLaunch(jupyter, o, req)
			if len(errs) == 0 {
				r := eff.Resources
				if r.GPUCount < 1 || r.GPUCount > 8 || r.CPUCores < 4 || r.CPUCores > 64 || r.MemoryGiB < 4 || r.MemoryGiB > 512 ||
					r.HostPort < 18000 || r.HostPort > 18999 {
					t.Fatalf("accepted out-of-bounds launch %+v from %s", r, body)
				}
				if eff.OperatingMode == "" || eff.ControlPlaneScope == "" || eff.TenantBoundaryMode == "" {
					t.Fatalf("accepted launch without modes: %+v", eff)
				}
			}
			for _, e := range errs {
				if e.Field == "" || e.Code == "" || e.Message == "" {
					t.Fatalf("incomplete field error %+v", e)
				}
			}
			_, _ = ResolveLaunch(slurm, o, req)
		}
	})
}
