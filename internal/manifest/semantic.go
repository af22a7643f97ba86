package manifest

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// digestRefRE is the same rule as the image_ref definition in the profile
// schema: a full repository reference pinned by sha256 digest, with no tag.
// The schema enforces it on manifests; SplitDigestRef serves readers of
// stored versions.
var digestRefRE = regexp.MustCompile(`^[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]{1,5})?(/[a-z0-9]+([._-]+[a-z0-9]+)*)+@sha256:[a-f0-9]{64}$`)

// SplitDigestRef splits a digest-pinned reference into repository and
// digest. ok is false for tags, short names and anything else that would let
// the bytes behind the reference change.
func SplitDigestRef(ref string) (repository, digest string, ok bool) {
	if !digestRefRE.MatchString(ref) {
		return "", "", false
	}
	i := strings.LastIndexByte(ref, '@')
	return ref[:i], ref[i+1:], true
}

// checker collects problems found by the rules a schema cannot state.
type checker struct {
	problems []Problem
}

func (c *checker) add(ptr, format string, args ...any) {
	c.problems = append(c.problems, Problem{Pointer: ptr, Message: fmt.Sprintf(format, args...)})
}

// checkPackage runs the semantic checks over a normalised package. What
// the schema states (slug pattern, at least one version, digest-pinned
// references) it has already reported; only the rest is checked here.
func checkPackage(pkg *Package) []Problem {
	c := &checker{}
	c.modes(pkg.App.source+"/supported_modes", pkg.App.SupportedModes)
	seen := map[string]string{}
	for i := range pkg.Versions {
		v := &pkg.Versions[i]
		if first, dup := seen[v.Version]; dup {
			c.add(v.source+"/version", "version %q is declared twice (first at %s); each version string must be unique", v.Version, first)
		} else {
			seen[v.Version] = v.source + "/version"
		}
		c.version(pkg, v)
	}
	return c.problems
}

func (c *checker) modes(ptr string, m SupportedModes) {
	// platform_managed means the platform runs the control plane, so it
	// only makes sense together with the platform scope, and vice versa.
	pm := slices.Contains(m.OperatingModes, ModePlatformManaged)
	ps := slices.Contains(m.ControlPlaneScopes, ScopePlatform)
	if pm && !ps {
		c.add(ptr+"/control_plane_scopes", "operating mode platform_managed needs control plane scope platform")
	}
	if ps && !pm {
		c.add(ptr+"/operating_modes", "control plane scope platform needs operating mode platform_managed")
	}
	td := slices.Contains(m.OperatingModes, ModeTenantDedicated)
	if td && !slices.Contains(m.ControlPlaneScopes, ScopeProject) && !slices.Contains(m.ControlPlaneScopes, ScopeTenant) {
		c.add(ptr+"/control_plane_scopes", "operating mode tenant_dedicated needs control plane scope project or tenant")
	}
}

func (c *checker) version(pkg *Package, v *Version) {
	src := v.source
	switch {
	case v.RuntimeBackend == "":
		c.add(src, "runtime_backend is not declared and cannot be derived: declare it on the app, the version or through runtime_profile.kind")
	case v.RuntimeProfile != nil && v.RuntimeProfile.Kind != v.RuntimeBackend:
		c.add(src+"/runtime_profile/kind", "runtime_profile.kind %q does not match runtime_backend %q", v.RuntimeProfile.Kind, v.RuntimeBackend)
	case v.RuntimeProfile == nil && (v.RuntimeBackend == BackendLaunchableOCI || v.RuntimeBackend == BackendDockerCompose):
		c.add(src, "runtime_backend %s needs a runtime_profile of kind %s", v.RuntimeBackend, v.RuntimeBackend)
	}
	for _, m := range v.SupportedModes.OperatingModes {
		if !slices.Contains(pkg.App.SupportedModes.OperatingModes, m) {
			c.add(src+"/supported_modes/operating_modes", "operating mode %q is not supported by the app", m)
		}
	}
	for _, s := range v.SupportedModes.ControlPlaneScopes {
		if !slices.Contains(pkg.App.SupportedModes.ControlPlaneScopes, s) {
			c.add(src+"/supported_modes/control_plane_scopes", "control plane scope %q is not supported by the app", s)
		}
	}
	c.modes(src+"/supported_modes", v.SupportedModes)
	c.schema(src+"/placement_schema", v.PlacementSchema)
	c.schema(src+"/config_schema", v.ConfigSchema)
	artifacts := c.artifacts(src+"/artifacts", v.Artifacts)
	if v.UI != nil && v.UI.ExtensionKind == "embedded" && v.RuntimeProfile != nil && v.RuntimeProfile.Kind == ProfileLaunchableOCI {
		if !slices.ContainsFunc(v.RuntimeProfile.Ports, func(p Port) bool { return p.Expose == ExposeEmbeddedUIGateway }) {
			c.add(src+"/runtime_profile/ports", "an embedded UI needs a port exposed as embedded_ui_gateway")
		}
	}
	if p := v.RuntimeProfile; p != nil {
		c.profile(src+"/runtime_profile", p, v, artifacts)
	}
}

func (c *checker) schema(ptr string, raw []byte) {
	if len(raw) == 0 {
		return
	}
	if _, err := CompileSchema(raw); err != nil {
		c.add(ptr, "%s", compileErrorMessage(err))
	}
}

// artifacts checks the artifact list and returns the artifacts by name.
func (c *checker) artifacts(ptr string, list []Artifact) map[string]Artifact {
	byName := map[string]Artifact{}
	for i, a := range list {
		ap := pointerIndex(ptr, i)
		if _, dup := byName[a.Name]; dup {
			c.add(ap+"/name", "artifact name %q is used twice; names identify artifacts within a version", a.Name)
			continue
		}
		byName[a.Name] = a
		switch a.ArtifactKind {
		case "oci":
			if a.SourceType != "oci_registry" {
				c.add(ap+"/source_type", "an oci artifact comes from source_type oci_registry")
			}
			if a.Repository == "" {
				c.add(ap, "an oci artifact needs a repository")
			}
		case "blob":
			if a.SourceType != "blob_store" {
				c.add(ap+"/source_type", "a blob artifact comes from source_type blob_store")
			}
		}
	}
	return byName
}

func (c *checker) profile(ptr string, p *RuntimeProfile, v *Version, artifacts map[string]Artifact) {
	switch p.Kind {
	case ProfileLaunchableOCI:
		c.launchable(ptr, p)
	case ProfileDockerCompose:
		c.compose(ptr, p, artifacts)
	default:
		c.add(ptr+"/kind", "unknown runtime profile kind %q; use launchable_oci or docker_compose", p.Kind)
		return
	}
	if r := p.Resources; r != nil {
		rp := ptr + "/resources"
		c.bounds(rp+"/gpu_count", "gpu_count", r.GPUCount)
		c.bounds(rp+"/cpu_cores", "cpu_cores", r.CPUCores)
		c.bounds(rp+"/memory_gib", "memory_gib", r.MemoryGiB)
		c.bounds(rp+"/host_port", "host_port", r.HostPort)
		if v.Compatibility != nil && r.GPUCount != nil && r.GPUCount.Max != nil && *r.GPUCount.Max < v.Compatibility.MinGPUCount {
			c.add(v.source+"/compatibility/min_gpu_count", "min_gpu_count %d is above resources.gpu_count.max %d; no launch could satisfy both", v.Compatibility.MinGPUCount, *r.GPUCount.Max)
		}
	}
	if len(p.Parameters) > 0 {
		c.schema(ptr+"/parameters", p.Parameters)
	}
}

// bounds checks min <= default <= max for one resource input.
func (c *checker) bounds(ptr, name string, b *Bounds) {
	if b == nil {
		return
	}
	switch {
	case b.Min != nil && b.Max != nil && *b.Min > *b.Max:
		c.add(ptr, "%s bounds are reversed: min %d is greater than max %d", name, *b.Min, *b.Max)
	case b.Default != nil && b.Min != nil && *b.Default < *b.Min:
		c.add(ptr+"/default", "%s default %d is below min %d", name, *b.Default, *b.Min)
	case b.Default != nil && b.Max != nil && *b.Default > *b.Max:
		c.add(ptr+"/default", "%s default %d is above max %d", name, *b.Default, *b.Max)
	}
}

// visibleDevicesEnv tells the NVIDIA container runtime which GPUs a
// container sees; the node agent sets it to the allocation's GPUs alone.
const visibleDevicesEnv = "NVIDIA_VISIBLE_DEVICES"

func (c *checker) launchable(ptr string, p *RuntimeProfile) {
	envs := map[string]bool{}
	for i, e := range p.Env {
		if envs[e.Name] {
			c.add(pointerIndex(ptr+"/env", i)+"/name", "environment variable %q is set twice", e.Name)
		}
		if e.Name == visibleDevicesEnv {
			c.add(pointerIndex(ptr+"/env", i)+"/name", "environment variable %s is set by the platform to the GPUs of the instance's allocation (none when it has none); remove it and size GPUs with resources.gpu_count", e.Name)
		}
		envs[e.Name] = true
	}
	ports := map[int]bool{}
	names := map[string]bool{}
	for i, pt := range p.Ports {
		pp := pointerIndex(ptr+"/ports", i)
		if ports[pt.Container] {
			c.add(pp+"/container", "container port %d is declared twice", pt.Container)
		}
		ports[pt.Container] = true
		if pt.Name != "" {
			if names[pt.Name] {
				c.add(pp+"/name", "port name %q is used twice", pt.Name)
			}
			names[pt.Name] = true
		}
	}
	if r := p.Readiness; r != nil && r.Type != ReadinessStartCompleted && len(p.Ports) > 0 && !ports[r.Port] {
		c.add(ptr+"/readiness/port", "readiness port %d is not one of the declared ports", r.Port)
	}
}

func (c *checker) compose(ptr string, p *RuntimeProfile, artifacts map[string]Artifact) {
	t := p.Topology
	if t == nil {
		return
	}
	tp := ptr + "/topology"
	services := map[string]bool{}
	primaries := 0
	for i, s := range t.Services {
		sp := pointerIndex(tp+"/services", i)
		if services[s.Name] {
			c.add(sp+"/name", "service name %q is used twice", s.Name)
		}
		services[s.Name] = true
		if s.Role == "primary" {
			primaries++
		}
		a, ok := artifacts[s.Artifact]
		switch {
		case !ok:
			c.add(sp+"/artifact", "artifact %q is not declared in the version's artifacts", s.Artifact)
		case a.ArtifactKind != "oci":
			c.add(sp+"/artifact", "artifact %q is a %s artifact; services run OCI images", s.Artifact, a.ArtifactKind)
		}
	}
	if primaries != 1 && len(t.Services) > 0 {
		c.add(tp+"/services", "exactly one service must have role primary (found %d)", primaries)
	}
	endpointPorts := map[int]bool{}
	names := map[string]bool{}
	for i, e := range t.Endpoints {
		ep := pointerIndex(tp+"/endpoints", i)
		if !services[e.Service] {
			c.add(ep+"/service", "endpoint names service %q, which the topology does not declare", e.Service)
		}
		if names[e.Name] {
			c.add(ep+"/name", "endpoint name %q is used twice", e.Name)
		}
		names[e.Name] = true
		endpointPorts[e.Port] = true
	}
	names = map[string]bool{}
	for i, m := range t.Mounts {
		mp := pointerIndex(tp+"/mounts", i)
		if !services[m.Service] {
			c.add(mp+"/service", "mount names service %q, which the topology does not declare", m.Service)
		}
		if names[m.Name] {
			c.add(mp+"/name", "mount name %q is used twice", m.Name)
		}
		names[m.Name] = true
		if slices.Contains(strings.Split(m.Target, "/"), "..") {
			c.add(mp+"/target", "mount target must not contain '..'")
		}
	}
	if r := p.Readiness; r != nil && r.Type != ReadinessStartCompleted && len(t.Endpoints) > 0 && !endpointPorts[r.Port] {
		c.add(ptr+"/readiness/port", "readiness port %d is not the port of a declared endpoint", r.Port)
	}
}
