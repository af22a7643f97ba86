package manifest

import (
	"encoding/json"
	"fmt"
)

// nestedForm and flatForm are the two accepted spellings of a package. Both
// decode with encoding/json after schema validation has vouched for the
// types, so a decode error here only happens when schema problems exist.
type nestedForm struct {
	App      App       `json:"app"`
	Version  *Version  `json:"version"`
	Versions []Version `json:"versions"`
}

// build decodes the validated tree into the canonical Package. It returns
// nil when the tree does not have the shape the schema demands (schema
// problems already explain why; a decode error is returned as a problem in
// case they do not). Normalisation can itself find problems.
func build(root any) (*Package, []Problem) {
	obj, ok := root.(map[string]any)
	if !ok {
		return nil, nil
	}
	raw, err := json.Marshal(wholeNumbers(obj, verbatim).(map[string]any))
	if err != nil {
		return nil, undecodable(err)
	}
	pkg := &Package{}
	if _, nested := obj["app"]; nested {
		var n nestedForm
		if err := json.Unmarshal(raw, &n); err != nil {
			return nil, undecodable(err)
		}
		pkg.App = n.App
		pkg.App.source = "/app"
		switch {
		case n.Versions != nil:
			pkg.Versions = n.Versions
			for i := range pkg.Versions {
				pkg.Versions[i].source = pointerIndex("/versions", i)
			}
		case n.Version != nil:
			n.Version.source = "/version"
			pkg.Versions = []Version{*n.Version}
		}
	} else {
		// The flat form is one app and one version written side by side;
		// the same object decodes into both halves.
		var v Version
		if err := json.Unmarshal(raw, &pkg.App); err != nil {
			return nil, undecodable(err)
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, undecodable(err)
		}
		if v.UI == nil {
			v.UI = pkg.App.UI
		}
		pkg.Versions = []Version{v}
	}
	var problems []Problem
	for i := range pkg.Versions {
		ps, err := normalizeVersion(&pkg.App, &pkg.Versions[i])
		if err != nil {
			return nil, undecodable(err)
		}
		problems = append(problems, ps...)
	}
	if pkg.App.RuntimeBackend == "" && len(pkg.Versions) > 0 {
		pkg.App.RuntimeBackend = pkg.Versions[0].RuntimeBackend
	}
	pkg.App.SupportedModes = withDefaultModes(pkg.App.SupportedModes)
	return pkg, problems
}

// undecodable reports a tree the Go types cannot hold. The schema should
// have refused it first; when it has not, the manifest is still refused
// with a problem rather than answered with neither a package nor a problem.
func undecodable(err error) []Problem {
	return []Problem{{Message: "the manifest cannot be read: " + err.Error()}}
}

// withDefaultModes applies the platform's recommended starting point,
// tenant_dedicated with a project-scoped control plane, to missing lists.
func withDefaultModes(m SupportedModes) SupportedModes {
	if len(m.OperatingModes) == 0 {
		m.OperatingModes = []string{ModeTenantDedicated}
	}
	if len(m.ControlPlaneScopes) == 0 {
		m.ControlPlaneScopes = []string{ScopeProject}
	}
	return m
}

// normalizeVersion makes a version self-contained (inheriting app-level
// defaults) and gives every value one spelling, so that two submissions
// meaning the same thing digest the same.
func normalizeVersion(app *App, v *Version) (problems []Problem, err error) {
	if v.RuntimeBackend == "" {
		v.RuntimeBackend = app.RuntimeBackend
	}
	if v.RuntimeBackend == "" && v.RuntimeProfile != nil {
		// The SDK sample names no backend: its profile kind says it.
		v.RuntimeBackend = v.RuntimeProfile.Kind
	}
	if len(v.SupportedModes.OperatingModes) == 0 {
		v.SupportedModes.OperatingModes = app.SupportedModes.OperatingModes
	}
	if len(v.SupportedModes.ControlPlaneScopes) == 0 {
		v.SupportedModes.ControlPlaneScopes = app.SupportedModes.ControlPlaneScopes
	}
	v.SupportedModes = withDefaultModes(v.SupportedModes)
	if v.UI == nil && app.UI != nil {
		ui := *app.UI
		v.UI = &ui
	}
	for _, raw := range []*json.RawMessage{&v.PlacementSchema, &v.ConfigSchema} {
		if err := canonicalizeRaw(raw); err != nil {
			return nil, err
		}
	}
	if p := v.RuntimeProfile; p != nil {
		if err := canonicalizeRaw(&p.Parameters); err != nil {
			return nil, err
		}
		if r := p.Resources; r != nil {
			problems = append(problems, foldSeedResources(r, v.source+"/runtime_profile/resources")...)
		}
	}
	return problems, nil
}

// foldSeedResources moves the seed's min_memory_mib and min_vcpu into the
// bounds they stand for, so that one spelling reaches the launch code. A
// seed minimum that contradicts the explicit bounds is reported at the seed
// field the author wrote, and not folded.
func foldSeedResources(r *Resources, ptr string) []Problem {
	var out []Problem
	fold := func(seed int, seedName, unit string, b **Bounds, boundsName string) {
		if seed <= 0 {
			return
		}
		if *b == nil {
			*b = &Bounds{}
		}
		bb := *b
		switch {
		case bb.Min != nil && *bb.Min != seed:
			out = append(out, Problem{Pointer: pointerJoin(ptr, seedName), Message: fmt.Sprintf("%s means a minimum of %d %s but %s.min is %d; keep one of them", seedName, seed, unit, boundsName, *bb.Min)})
		case bb.Default != nil && *bb.Default < seed, bb.Max != nil && *bb.Max < seed:
			out = append(out, Problem{Pointer: pointerJoin(ptr, seedName), Message: fmt.Sprintf("%s means a minimum of %d %s, above %s.default or %s.max", seedName, seed, unit, boundsName, boundsName)})
		default:
			bb.Min = &seed
		}
	}
	if r.MinMemoryMiB > 0 {
		fold((r.MinMemoryMiB+1023)/1024, "min_memory_mib", "GiB", &r.MemoryGiB, "memory_gib")
		r.MinMemoryMiB = 0
	}
	if r.MinVCPU > 0 {
		fold(r.MinVCPU, "min_vcpu", "cores", &r.CPUCores, "cpu_cores")
		r.MinVCPU = 0
	}
	return out
}

func canonicalizeRaw(raw *json.RawMessage) error {
	if len(*raw) == 0 {
		return nil
	}
	c, err := canonicalJSON(*raw)
	if err != nil {
		return fmt.Errorf("canonicalize: %w", err)
	}
	*raw = c
	return nil
}
