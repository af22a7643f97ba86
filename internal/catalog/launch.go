package catalog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/manifest"
)

// EntitlementOverrides is how a project's entitlement narrows what the
// manifest allows. An empty list narrows nothing: the manifest's own set
// applies.
type EntitlementOverrides struct {
	AllowedOperatingModes     []string `json:"allowed_operating_modes,omitempty"`
	AllowedControlPlaneScopes []string `json:"allowed_control_plane_scopes,omitempty"`
	AllowedVersions           []string `json:"allowed_versions,omitempty"`
	// CanaryOptIn lets the project launch versions whose artifacts are in
	// the canary stage; artifact selection (not ResolveLaunch) applies it.
	CanaryOptIn bool `json:"canary_opt_in,omitempty"`
}

// LaunchRequest is what a client asks for when it launches an app version.
// Everything is a hint or an input to validate; the server decides the
// effective values.
type LaunchRequest struct {
	OperatingMode     string          `json:"operating_mode,omitempty"`
	ControlPlaneScope string          `json:"control_plane_scope,omitempty"`
	Resources         ResourceRequest `json:"resources,omitempty"`
	Config            json.RawMessage `json:"config,omitempty"`
	PlacementIntent   json.RawMessage `json:"placement_intent,omitempty"`
	Parameters        json.RawMessage `json:"parameters,omitempty"`
}

// ResourceRequest holds launch-time resource inputs; nil means "use the
// profile's default".
type ResourceRequest struct {
	GPUCount  *int `json:"gpu_count,omitempty"`
	CPUCores  *int `json:"cpu_cores,omitempty"`
	MemoryGiB *int `json:"memory_gib,omitempty"`
	HostPort  *int `json:"host_port,omitempty"`
}

// Tenant boundary modes, derived from operating mode and control-plane
// scope: who shares the runtime control plane.
const (
	BoundaryProjectIsolated = "project_isolated" // tenant_dedicated + project
	BoundaryTenantShared    = "tenant_shared"    // tenant_dedicated + tenant
	BoundaryPlatformShared  = "platform_shared"  // platform_managed + platform
)

// Effective is the server-decided launch: the values the instance records
// and clients read back.
type Effective struct {
	Version            string             `json:"version"`
	RuntimeBackend     string             `json:"runtime_backend"`
	OperatingMode      string             `json:"operating_mode"`
	ControlPlaneScope  string             `json:"control_plane_scope"`
	TenantBoundaryMode string             `json:"tenant_boundary_mode"`
	Resources          EffectiveResources `json:"resources"`
	Config             json.RawMessage    `json:"config,omitempty"`
	PlacementIntent    json.RawMessage    `json:"placement_intent,omitempty"`
	Parameters         json.RawMessage    `json:"parameters,omitempty"`
}

// EffectiveResources are the resolved resource inputs. Zero CPU or memory
// means the profile sets no limit; zero host port means the platform picks
// one when a port is exposed host-locally.
type EffectiveResources struct {
	GPUCount  int `json:"gpu_count"`
	CPUCores  int `json:"cpu_cores,omitempty"`
	MemoryGiB int `json:"memory_gib,omitempty"`
	HostPort  int `json:"host_port,omitempty"`
}

// Codes of the field errors ResolveLaunch reports (errdefs.FieldError:
// Field is a JSON pointer into the request; Code is stable for programs,
// Message for people).
const (
	CodeInvalid            = "invalid"
	CodeOutOfRange         = "out_of_range"
	CodeNotSupported       = "not_supported"
	CodeNotEntitled        = "not_entitled"
	CodeSchemaViolation    = "schema_violation"
	CodeInvalidRequirement = "invalid_requirement"
	CodeDuplicate          = "duplicate"
)

// Platform-wide limits on resource inputs, whatever a profile declares.
// Host ports below 1024 are privileged on the node and never handed out.
const (
	minHostPort = 1024
	maxHostPort = 65535
	maxGPUCount = 64
	maxCPUCores = 1024
	maxMemGiB   = 16384
)

// pipPackagesParameter is the launch parameter of the Jupyter
// package-install slice. It is checked as PEP 508 even if a profile forgets
// to declare "format": "pep508", because its values reach a package install
// on the node.
const pipPackagesParameter = "pip_packages"

// pep508Format makes "format": "pep508" in a parameter schema a real check.
var pep508Format = &jsonschema.Format{
	Name: "pep508",
	Validate: func(v any) error {
		s, ok := v.(string)
		if !ok {
			return nil
		}
		_, err := ParseRequirement(s)
		return err
	},
}

// ResolveLaunch decides the effective launch of version for a project whose
// entitlement is overrides: it applies defaults, enforces resource bounds,
// validates config, placement intent and parameters against the version's
// schemas, and resolves the operating mode and control-plane scope. All
// problems are returned together so a form can show them at once; the
// Effective value is only meaningful when there are none.
func ResolveLaunch(version manifest.Version, overrides EntitlementOverrides, req LaunchRequest) (Effective, []errdefs.FieldError) {
	r := &resolver{}
	eff := Effective{Version: version.Version, RuntimeBackend: version.RuntimeBackend}
	if len(overrides.AllowedVersions) > 0 && !slices.Contains(overrides.AllowedVersions, version.Version) {
		r.add("/version", CodeNotEntitled, "version %s is not among the versions this project is entitled to (%v)", version.Version, overrides.AllowedVersions)
	}
	eff.OperatingMode, eff.ControlPlaneScope = r.modes(version.SupportedModes, overrides, req)
	eff.TenantBoundaryMode = boundaryMode(eff.OperatingMode, eff.ControlPlaneScope)
	eff.Resources = r.resources(version, req.Resources)
	eff.Config = r.document("/config", "config", version.ConfigSchema, req.Config, nil)
	eff.PlacementIntent = r.document("/placement_intent", "placement_intent", version.PlacementSchema, req.PlacementIntent, nil)
	var params json.RawMessage
	if version.RuntimeProfile != nil {
		params = version.RuntimeProfile.Parameters
	}
	eff.Parameters = r.document("/parameters", "parameters", params, req.Parameters, r.checkPipPackages)
	return eff, r.errs
}

type resolver struct {
	errs []errdefs.FieldError
}

func (r *resolver) add(field, code, format string, args ...any) {
	// One message per field is enough; the first is the most specific.
	for _, e := range r.errs {
		if e.Field == field {
			return
		}
	}
	r.errs = append(r.errs, errdefs.FieldError{Field: field, Code: code, Message: fmt.Sprintf(format, args...)})
}

// modes resolves operating mode and control-plane scope. A request hint
// must be allowed by both the manifest and the entitlement; without a hint
// the platform default (tenant_dedicated + project) is used when allowed,
// else the first allowed value in the manifest's order.
func (r *resolver) modes(supported manifest.SupportedModes, o EntitlementOverrides, req LaunchRequest) (mode, scope string) {
	modes := allowed(supported.OperatingModes, o.AllowedOperatingModes, manifest.ModeTenantDedicated)
	scopes := allowed(supported.ControlPlaneScopes, o.AllowedControlPlaneScopes, manifest.ScopeProject)

	mode = r.pick("/operating_mode", "operating mode", req.OperatingMode,
		[]string{manifest.ModeTenantDedicated, manifest.ModePlatformManaged}, supported.OperatingModes, modes,
		func(string) bool { return true }, manifest.ModeTenantDedicated)
	if mode == "" {
		return "", ""
	}
	preferred := manifest.ScopeProject
	if mode == manifest.ModePlatformManaged {
		preferred = manifest.ScopePlatform
	}
	scope = r.pick("/control_plane_scope", "control plane scope", req.ControlPlaneScope,
		[]string{manifest.ScopeProject, manifest.ScopeTenant, manifest.ScopePlatform}, supported.ControlPlaneScopes, scopes,
		func(s string) bool { return scopeFits(mode, s) }, preferred)
	if scope != "" && !scopeFits(mode, scope) {
		r.add("/control_plane_scope", CodeInvalid, "control plane scope %s cannot be combined with operating mode %s", scope, mode)
	}
	return mode, scope
}

// allowed intersects the manifest's values with the entitlement's (when the
// entitlement narrows), falling back to the platform default when the
// manifest is silent.
func allowed(manifestSet, entitled []string, def string) []string {
	if len(manifestSet) == 0 {
		manifestSet = []string{def}
	}
	if len(entitled) == 0 {
		return manifestSet
	}
	var out []string
	for _, v := range manifestSet {
		if slices.Contains(entitled, v) {
			out = append(out, v)
		}
	}
	return out
}

func (r *resolver) pick(field, what, hint string, known, supported, allowedSet []string, fits func(string) bool, preferred string) string {
	if hint != "" {
		switch {
		case !slices.Contains(known, hint):
			r.add(field, CodeInvalid, "unknown %s %q (known: %v)", what, hint, known)
		case len(supported) > 0 && !slices.Contains(supported, hint):
			r.add(field, CodeNotSupported, "this app version does not support %s %s (supported: %v)", what, hint, supported)
		case !slices.Contains(allowedSet, hint):
			r.add(field, CodeNotEntitled, "this project is not entitled to %s %s (allowed: %v)", what, hint, allowedSet)
		default:
			return hint
		}
		return ""
	}
	if slices.Contains(allowedSet, preferred) && fits(preferred) {
		return preferred
	}
	for _, v := range allowedSet {
		if fits(v) {
			return v
		}
	}
	r.add(field, CodeNotEntitled, "no %s is allowed by both the app version and this project's entitlement", what)
	return ""
}

// scopeFits: a platform-managed runtime has a platform control plane and a
// tenant-dedicated one never does.
func scopeFits(mode, scope string) bool {
	if mode == manifest.ModePlatformManaged {
		return scope == manifest.ScopePlatform
	}
	return scope == manifest.ScopeProject || scope == manifest.ScopeTenant
}

func boundaryMode(mode, scope string) string {
	switch {
	case mode == manifest.ModePlatformManaged && scope == manifest.ScopePlatform:
		return BoundaryPlatformShared
	case mode == manifest.ModeTenantDedicated && scope == manifest.ScopeTenant:
		return BoundaryTenantShared
	case mode == manifest.ModeTenantDedicated && scope == manifest.ScopeProject:
		return BoundaryProjectIsolated
	}
	return ""
}

func (r *resolver) resources(v manifest.Version, req ResourceRequest) EffectiveResources {
	minGPU := 0
	if v.Compatibility != nil {
		minGPU = v.Compatibility.MinGPUCount
	}
	var res manifest.Resources
	if v.RuntimeProfile == nil {
		// Without a profile the runtime (Slurm, Ray, …) sizes itself from
		// its allocations; resource inputs would be silently ignored.
		for _, in := range []struct {
			field string
			val   *int
		}{{"gpu_count", req.GPUCount}, {"cpu_cores", req.CPUCores}, {"memory_gib", req.MemoryGiB}, {"host_port", req.HostPort}} {
			if in.val != nil {
				r.add("/resources/"+in.field, CodeNotSupported, "version %s has no runtime profile, so %s cannot be chosen at launch", v.Version, in.field)
			}
		}
		return EffectiveResources{GPUCount: minGPU}
	}
	if v.RuntimeProfile.Resources != nil {
		res = *v.RuntimeProfile.Resources
	}
	return EffectiveResources{
		GPUCount:  r.bounded("/resources/gpu_count", "gpu_count", res.GPUCount, req.GPUCount, minGPU, maxGPUCount, minGPU),
		CPUCores:  r.bounded("/resources/cpu_cores", "cpu_cores", res.CPUCores, req.CPUCores, 1, maxCPUCores, 0),
		MemoryGiB: r.bounded("/resources/memory_gib", "memory_gib", res.MemoryGiB, req.MemoryGiB, 1, maxMemGiB, 0),
		HostPort:  r.bounded("/resources/host_port", "host_port", res.HostPort, req.HostPort, minHostPort, maxHostPort, 0),
	}
}

// bounded resolves one resource input: the request if given (and within the
// profile's bounds and the platform's floor..ceil), else the profile default,
// else the profile minimum, else fallback.
func (r *resolver) bounded(field, name string, b *manifest.Bounds, req *int, floor, ceil, fallback int) int {
	if b == nil {
		b = &manifest.Bounds{}
	}
	if req == nil {
		switch {
		case b.Default != nil:
			return max(*b.Default, fallback)
		case b.Min != nil:
			return max(*b.Min, fallback)
		}
		return fallback
	}
	v := *req
	lo, hi := floor, ceil
	if b.Min != nil {
		lo = max(lo, *b.Min)
	}
	if b.Max != nil {
		hi = min(hi, *b.Max)
	}
	if v < lo || v > hi {
		r.add(field, CodeOutOfRange, "%s %d is outside the allowed range %d–%d", name, v, lo, hi)
	}
	return v
}

// document validates one JSON request document against a manifest schema,
// after filling in the schema's top-level defaults. With no schema only an
// empty document is accepted: input the runtime would ignore is refused.
func (r *resolver) document(field, name string, schema, raw json.RawMessage, extra func(field string, doc any)) json.RawMessage {
	doc, ok := r.decode(field, raw)
	if !ok {
		return nil
	}
	if len(schema) == 0 {
		if !isEmpty(doc) {
			r.add(field, CodeNotSupported, "this app version declares no %s schema, so %s must be empty", name, name)
		}
		return nil
	}
	if doc == nil {
		doc = map[string]any{}
	}
	applyDefaults(schema, doc)
	if p, err := manifest.CheckNumbers(doc); err != nil {
		// The schema validator cannot hold such a number (it crashed on
		// 1e-99999999): refused before it is asked.
		r.add(field+p, CodeInvalid, "%v", err)
		return nil
	}
	sch, err := manifest.CompileSchema(schema, pep508Format)
	if err != nil {
		// The manifest was validated at registration, so this is a
		// platform fault, but the launch still must not proceed.
		r.add(field, CodeInvalid, "the app version's %s schema does not compile: %v", name, err)
		return nil
	}
	if extra != nil {
		extra(field, doc)
	}
	if err := sch.Validate(doc); err != nil {
		for _, p := range manifest.SchemaErrorProblems(err, field) {
			r.add(p.Pointer, CodeSchemaViolation, "%s", p.Message)
		}
	}
	// The renderers read integer parameters into Go ints.
	doc = manifest.WholeNumbers(doc)
	out, err := json.Marshal(doc)
	if err != nil {
		r.add(field, CodeInvalid, "%v", err)
		return nil
	}
	return out
}

func (r *resolver) decode(field string, raw json.RawMessage) (any, bool) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, true
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		r.add(field, CodeInvalid, "not valid JSON: %v", err)
		return nil, false
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		r.add(field, CodeInvalid, "not valid JSON: trailing data")
		return nil, false
	}
	return doc, true
}

func isEmpty(doc any) bool {
	switch d := doc.(type) {
	case nil:
		return true
	case map[string]any:
		return len(d) == 0
	}
	return false
}

// applyDefaults copies each top-level property default of schema into doc
// where doc lacks the property, so the effective launch records what will
// actually be used.
func applyDefaults(schema json.RawMessage, doc any) {
	obj, ok := doc.(map[string]any)
	if !ok {
		return
	}
	var s struct {
		Properties map[string]struct {
			Default json.RawMessage `json:"default"`
		} `json:"properties"`
	}
	if json.Unmarshal(schema, &s) != nil {
		return
	}
	for name, p := range s.Properties {
		if _, set := obj[name]; set || len(p.Default) == 0 {
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(p.Default))
		dec.UseNumber()
		var v any
		if dec.Decode(&v) == nil {
			obj[name] = v
		}
	}
}

// checkPipPackages validates parameters.pip_packages as PEP 508
// requirements and refuses the same project named twice.
func (r *resolver) checkPipPackages(field string, doc any) {
	obj, _ := doc.(map[string]any)
	list, ok := obj[pipPackagesParameter].([]any)
	if !ok {
		return
	}
	seen := map[string]int{}
	for i, item := range list {
		f := field + "/" + pipPackagesParameter + "/" + strconv.Itoa(i)
		s, ok := item.(string)
		if !ok {
			continue // the schema reports the type
		}
		req, err := ParseRequirement(s)
		if err != nil {
			r.add(f, CodeInvalidRequirement, "%q is not an acceptable pip requirement: %v", s, err)
			continue
		}
		if j, dup := seen[req.NormalizedName()]; dup {
			r.add(f, CodeDuplicate, "package %s is already requested at index %d", req.Name, j)
			continue
		}
		seen[req.NormalizedName()] = i
	}
}
