package instances

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/artifacts"
	"github.com/gpuaas/gpuaas/internal/catalog"
	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/manifest"
	"github.com/gpuaas/gpuaas/internal/nodes"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/runtime"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// CreateInput is the body of POST …/app-instances. Operating mode and
// control-plane scope are hints; the answer carries the effective values.
type CreateInput struct {
	AppSlug            string                  `json:"app_slug"`
	Version            string                  `json:"version"`
	DisplayName        string                  `json:"display_name"`
	OperatingMode      string                  `json:"operating_mode,omitempty"`
	ControlPlaneScope  string                  `json:"control_plane_scope,omitempty"`
	Config             json.RawMessage         `json:"config,omitempty"`
	PlacementIntent    json.RawMessage         `json:"placement_intent,omitempty"`
	TargetAllocationID string                  `json:"target_allocation_id,omitempty"`
	Resources          catalog.ResourceRequest `json:"resources,omitempty"`
	Parameters         json.RawMessage         `json:"parameters,omitempty"`
}

func (in CreateInput) launchRequest() catalog.LaunchRequest {
	return catalog.LaunchRequest{OperatingMode: in.OperatingMode, ControlPlaneScope: in.ControlPlaneScope,
		Resources: in.Resources, Config: in.Config, PlacementIntent: in.PlacementIntent, Parameters: in.Parameters}
}

// Field error codes of refused launches (beside the catalog's).
const (
	CodeRequired              = "required"
	CodeHostPortInUse         = "host_port_in_use"
	CodeNotEntitled           = "not_entitled"
	CodeEntitlementChanged    = "entitlement_changed"
	CodeNotFound              = "not_found"
	CodeVersionNotLaunchable  = "version_not_launchable"
	CodeArtifactNotReady      = "artifact_not_ready"
	CodeArtifactRevoked       = "artifact_revoked"
	CodeAllocationNotActive   = "allocation_not_active"
	CodeNoAllocation          = "no_compatible_allocation"
	CodeIncompatibleTarget    = "incompatible_target"
	CodeDoesNotFit            = "does_not_fit"
	CodeBackendNotSupported   = "not_supported"
	CodeNotAnEarlierVersion   = "not_an_earlier_version"
	CodeSameVersion           = "same_version"
	maxDisplayNameLen         = 200
	maxLogTailLines           = 50
	operationInProgressCode   = "operation_in_progress"
	instanceNotFoundErrorCode = "app_instance_not_found"
)

// LaunchDoc is what an instance keeps of its launch: the request (re-resolved
// against the target version on upgrade and rollback) and the effective values.
type LaunchDoc struct {
	Request   catalog.LaunchRequest `json:"request"`
	Effective catalog.Effective     `json:"effective"`
}

// HistoryEntry is one version an instance ran, with its pinned digest.
type HistoryEntry struct {
	Version string `json:"version"`
	Digest  string `json:"digest"`
}

// target is a resolved launch of one version onto one allocation: what the
// worker renders into node tasks.
type target struct {
	version    catalog.AppVersion
	manifest   manifest.Version
	effective  catalog.Effective
	artifacts  map[string]artifacts.AppArtifact // by manifest artifact name; runtime.LaunchImage for the profile image
	digest     string                           // the primary image digest
	allocation Allocation
}

// Create validates a launch and records the instance as requested, with
// the operation that will drive it; the worker does the rest. Every refusal
// is a field error.
func (s *Service) Create(ctx context.Context, g *iam.Grants, projectID string, in CreateInput) (AppInstance, InstanceOperation, error) {
	p, err := s.IAM.Project(ctx, g, projectID, iam.PermInstanceCreate)
	if err != nil {
		return AppInstance{}, InstanceOperation{}, err
	}
	in.AppSlug, in.Version, in.DisplayName = strings.TrimSpace(in.AppSlug), strings.TrimSpace(in.Version), strings.TrimSpace(in.DisplayName)
	var fe []errdefs.FieldError
	if in.AppSlug == "" {
		fe = append(fe, errdefs.FieldError{Field: "/app_slug", Code: CodeRequired, Message: "is required: the catalog slug of the app to launch"})
	}
	if in.Version == "" {
		fe = append(fe, errdefs.FieldError{Field: "/version", Code: CodeRequired, Message: "is required: a published version of the app"})
	}
	if in.DisplayName == "" || len(in.DisplayName) > maxDisplayNameLen {
		fe = append(fe, errdefs.FieldError{Field: "/display_name", Code: CodeRequired, Message: fmt.Sprintf("is required, at most %d characters", maxDisplayNameLen)})
	}
	if fe != nil {
		return AppInstance{}, InstanceOperation{}, errdefs.Validation(fe)
	}
	t, err := s.resolve(ctx, s.Store.Read(), p, in.AppSlug, in.Version, in.launchRequest(), in.TargetAllocationID, false, gpuCheck{on: true})
	if err != nil {
		return AppInstance{}, InstanceOperation{}, err
	}
	if sharedLaunch(t.effective) {
		// The org's (or the platform's) instance: launched only with a role
		// there.
		if err := s.sharedRole(ctx, g, p.OrgID, t.effective.OperatingMode, "", iam.PermInstanceCreate); err != nil {
			return AppInstance{}, InstanceOperation{}, err
		}
	}
	req := in.launchRequest()
	doc, err := json.Marshal(LaunchDoc{Request: req, Effective: t.effective})
	if err != nil {
		return AppInstance{}, InstanceOperation{}, err
	}
	now := s.Now().UTC()
	who := principal.From(ctx).Key()
	inst := AppInstance{ID: iam.NewID(), OrgID: p.OrgID, ProjectID: p.ID, AppSlug: in.AppSlug, DisplayName: in.DisplayName,
		Version: t.version.Version, Digest: t.digest, Status: StatusRequested,
		OperatingMode: t.effective.OperatingMode, ControlPlaneScope: t.effective.ControlPlaneScope,
		RuntimeBackend: t.effective.RuntimeBackend, TenantBoundaryMode: t.effective.TenantBoundaryMode,
		Effective: doc, TargetAllocationID: t.allocation.ID, NodeID: t.allocation.NodeID, HostPort: t.effective.Resources.HostPort,
		CreatedBy: who, CreatedAt: now, UpdatedAt: now, Health: Health{State: HealthUnknown}}
	op := s.newOperation(ctx, inst, OpCreate, "", inst.Version, fmt.Sprintf("launch %s %s", inst.AppSlug, inst.Version))
	inst.CurrentOperationID = op.ID
	err = s.Store.Mutate(ctx, func(tx Tx) error {
		// Billing (issue 13): the project's spend budget, before anything is recorded.
		if err := s.checkLaunch(ctx, tx, p.ID, inst.AppSlug); err != nil {
			return err
		}
		if err := holdVersion(ctx, tx, inst.AppSlug, inst.Version, false); err != nil {
			return err
		}
		if err := holdEntitlement(ctx, tx, p, t, req); err != nil {
			return err
		}
		if err := holdArtifacts(ctx, tx, t.artifacts); err != nil {
			return err
		}
		// The node's placement lock, taken here, covers the host port
		// below too: two launches onto one node pick one after the other.
		if err := claimGPUs(ctx, tx, &inst, t.allocation, t.effective.Resources.GPUCount); err != nil {
			return gpuRefusal(err)
		}
		if err := s.reserveHostPort(ctx, tx, &inst, t, req); err != nil {
			return err
		}
		if err := tx.InsertAppInstance(ctx, inst); err != nil {
			return err
		}
		if err := tx.InsertInstanceOperation(ctx, op); err != nil {
			return err
		}
		if err := s.record(ctx, tx, inst, op, EventRequested, nil); err != nil {
			return err
		}
		return tx.Audit(storage.AuditEvent{Action: "app_instance.create", ResourceType: "app_instance", ResourceID: inst.ID,
			OrgID: inst.OrgID, ProjectID: inst.ProjectID}, nil, auditState(inst))
	})
	if err != nil {
		return AppInstance{}, InstanceOperation{}, err
	}
	s.Logger.InfoContext(ctx, "app instance requested", "app_instance_id", inst.ID, "project_id", p.ID, "org_id", p.OrgID,
		"app_slug", inst.AppSlug, "version", inst.Version, "operating_mode", inst.OperatingMode,
		"control_plane_scope", inst.ControlPlaneScope, "runtime_backend", inst.RuntimeBackend)
	s.kick()
	return inst, op, nil
}

// LaunchRefusal runs create's checks of a launch read-only (entitlement,
// version, launch values, runtime backend, artifact pins, placement onto
// one of the project's allocations, the billing launch gate) and returns
// the error create would answer, or nil when create would accept it.
// Launch preview answers with it, so a preview never passes what create
// refuses.
func (s *Service) LaunchRefusal(ctx context.Context, g *iam.Grants, projectID, appSlug, version string, req catalog.LaunchRequest) error {
	p, err := s.IAM.Project(ctx, g, projectID, iam.PermInstanceCreate)
	if err != nil {
		return err
	}
	q := s.Store.Read()
	t, err := s.resolve(ctx, q, p, appSlug, version, req, "", false, gpuCheck{on: true})
	if err != nil {
		return err
	}
	if sharedLaunch(t.effective) {
		// A preview is a question, not an attempt: refused as create
		// would be, but not audited as a denied one.
		if err := sharedRoleRefusal(g, p.OrgID, t.effective.OperatingMode, "", iam.PermInstanceCreate); err != nil {
			return err
		}
	}
	return s.checkLaunch(ctx, nil, p.ID, appSlug) // a preview: outside any transaction
}

// sharedLaunch reports whether a launch makes a shared instance: the
// org's (control_plane_scope tenant) or the platform's.
func sharedLaunch(eff catalog.Effective) bool {
	return eff.ControlPlaneScope == manifest.ScopeTenant || platformManaged(eff.OperatingMode)
}

// resolve decides a launch of appSlug@version in project p onto an
// allocation (allocationID, or the first compatible one of the project):
// entitlement, version status, launch parameters, artifacts and target
// compatibility. existing allows a deprecated version (an instance that
// already runs it may go back to it); gpus says whether the allocation
// must have the GPUs free.
func (s *Service) resolve(ctx context.Context, q Queries, p iam.Project, appSlug, version string, req catalog.LaunchRequest, allocationID string, existing bool, gpus gpuCheck) (target, error) {
	eff, v, err := catalog.ResolveForProject(ctx, q, p, appSlug, version, req)
	if err != nil && existing && v.Status == catalog.StatusDeprecated {
		eff, v, err = s.resolveDeprecated(ctx, q, p, v, req)
	}
	if err != nil {
		return target{}, launchRefusal(err)
	}
	t := target{version: v, effective: eff}
	if err := json.Unmarshal(v.Manifest, &t.manifest); err != nil {
		return target{}, fmt.Errorf("stored manifest of %s %s: %w", appSlug, version, err)
	}
	switch {
	case workerDriven(t.manifest.RuntimeBackend) && t.manifest.ExternalWorkerContract != nil:
		// An external worker of the app carries its operations out
		// (external.go); it pins what it runs itself.
	case t.manifest.RuntimeProfile == nil || workerDriven(t.manifest.RuntimeBackend):
		return target{}, errdefs.Validation([]errdefs.FieldError{{Field: "/version", Code: CodeBackendNotSupported,
			Message: fmt.Sprintf("version %s runs on runtime backend %s, which node agents do not run and for which it declares no external_worker_contract; pick a launchable_oci or docker_compose version", version, t.manifest.RuntimeBackend)}})
	default:
		if t.artifacts, t.digest, err = s.pinArtifacts(ctx, q, v, t.manifest); err != nil {
			return target{}, err
		}
	}
	if t.allocation, err = s.placement(ctx, q, p, t.manifest, eff, allocationID, gpus); err != nil {
		return target{}, err
	}
	if !workerDriven(t.manifest.RuntimeBackend) {
		if err := s.trialRender(p, appSlug, t); err != nil {
			return target{}, err
		}
	}
	return t, nil
}

// trialRender renders the deployment as the driver will, with a stand-in
// identity and workload name, so that launch values the renderer refuses
// are refused when the launch (or upgrade, or preview) is asked for, with
// the reason, rather than after an operation began and an allocation was
// tied up.
func (s *Service) trialRender(p iam.Project, appSlug string, t target) error {
	images := make(map[string]nodeapi.ImagePull, len(t.artifacts))
	for art, a := range t.artifacts {
		images[art] = nodeapi.ImagePull{Repository: s.imageRepository(t, art, a), Digest: a.Digest}
	}
	d := runtime.Deployment{ProjectID: p.ID, OrgID: p.OrgID, NodeID: t.allocation.NodeID, AppSlug: appSlug, Version: t.version.Version,
		Name: "trial", Profile: t.manifest.RuntimeProfile, Images: images, Resources: workloadResources(t.effective.Resources, t.allocation),
		Parameters: t.effective.Parameters, GPUUUIDs: t.allocation.GPUUUIDs, Identity: &runtime.Identity{}}
	if _, err := runtime.Render(d); err != nil {
		return errdefs.FailedPrecondition(ReasonRenderFailed, "%s %s cannot be deployed with these launch values: %v", appSlug, t.version.Version, err)
	}
	return nil
}

// resolveDeprecated resolves a deprecated version for an instance that
// already ran it: the entitlement and launch values still apply.
func (s *Service) resolveDeprecated(ctx context.Context, q Queries, p iam.Project, v catalog.AppVersion, req catalog.LaunchRequest) (catalog.Effective, catalog.AppVersion, error) {
	var mv manifest.Version
	if err := json.Unmarshal(v.Manifest, &mv); err != nil {
		return catalog.Effective{}, v, err
	}
	eff, err := catalog.ResolveEntitled(ctx, q, p, v.AppSlug, mv, req)
	return eff, v, err
}

// holdVersion keeps the version a launch (or an upgrade or rollback) goes
// to from changing status until the recording transaction ends, and
// refuses it if the status changed since resolve read it: a version
// deprecated or retired meanwhile. Without the hold, a retirement whose
// instance count ran before this transaction committed would pass, and
// the instance would run a retired version. existing allows a deprecated
// version, as resolve does for a rollback.
func holdVersion(ctx context.Context, tx Tx, appSlug, version string, existing bool) error {
	v, err := tx.ShareAppVersion(ctx, appSlug, version)
	if errors.Is(err, storage.ErrNotFound) {
		return launchRefusal(errdefs.NotFound("app_version_not_found", "app %s has no version %q", appSlug, version))
	}
	if err != nil {
		return err
	}
	if v.Status == catalog.StatusPublished || existing && v.Status == catalog.StatusDeprecated {
		return nil
	}
	return launchRefusal(errdefs.FailedPrecondition("version_not_launchable",
		"version %s of app %s became %s while this request ran; pick a published version (gpuaas app versions %s)", version, appSlug, v.Status, appSlug))
}

// holdEntitlement keeps the entitlements a launch (or an upgrade or
// rollback) was resolved under (the project's, and the org's for an
// org-shared instance) from changing until the transaction that records it
// ends, and refuses it if they changed since resolve read them: disabled,
// or narrowed so that the request now resolves to other values. Without
// the hold, an entitlement disabled while a launch ran could be followed by
// a new instance of the app, its audit row after the disabling's.
func holdEntitlement(ctx context.Context, tx Tx, p iam.Project, t target, req catalog.LaunchRequest) error {
	eff, err := catalog.ResolveEntitled(ctx, sharedEntitlements{tx}, p, t.version.AppSlug, t.manifest, req)
	if err != nil {
		return launchRefusal(err)
	}
	if !reflect.DeepEqual(eff, t.effective) {
		return errdefs.Validation([]errdefs.FieldError{{Field: "/app_slug", Code: CodeEntitlementChanged,
			Message: fmt.Sprintf("the entitlement to app %s changed while this request ran, and the request would now resolve to other values; preview it again and send it again", t.version.AppSlug)}})
	}
	return nil
}

// sharedEntitlements is the recording transaction as the catalog's launch
// resolution reads it, with the entitlements read held (ShareEntitlement).
type sharedEntitlements struct{ Tx }

func (s sharedEntitlements) GetEntitlement(ctx context.Context, projectID, appSlug string) (catalog.AppEntitlement, error) {
	return s.ShareEntitlement(ctx, projectID, appSlug)
}

func (s sharedEntitlements) GetOrgEntitlement(ctx context.Context, orgID, appSlug string) (catalog.AppEntitlement, error) {
	return s.ShareOrgEntitlement(ctx, orgID, appSlug)
}

// holdArtifacts keeps the artifacts resolve pinned from changing state
// until the transaction that records their digests ends, and refuses if
// one stopped being launchable since it was pinned (deprecated, retired or
// revoked meanwhile): the artifact's retire counts the instances running
// its digest only once it holds the row, so without the hold a launch
// could record a digest the retire had just counted no user of.
func holdArtifacts(ctx context.Context, tx Tx, pinned map[string]artifacts.AppArtifact) error {
	// In id order, as every launch holds them: two transactions never
	// wait on each other's rows crosswise.
	ordered := slices.SortedFunc(maps.Values(pinned), func(a, b artifacts.AppArtifact) int { return strings.Compare(a.ID, b.ID) })
	for _, p := range ordered {
		a, err := tx.ShareAppArtifact(ctx, p.ID)
		if err != nil && !errors.Is(err, storage.ErrNotFound) {
			return err
		}
		if err == nil && a.Launchable() {
			continue
		}
		code, what := CodeArtifactNotReady, "is no longer active and verified"
		if a.Revoked() {
			code, what = CodeArtifactRevoked, "was revoked"
		}
		return errdefs.Validation([]errdefs.FieldError{{Field: "/version", Code: code,
			Message: fmt.Sprintf("artifact %s (%s) %s while this request ran; it can no longer be launched", p.ArtifactName, p.Digest, what)}})
	}
	return nil
}

// launchRefusal turns the catalog's refusals into field errors, so a form
// can point at the field: entitlement and app at /app_slug, version state
// at /version. Field errors pass through.
func launchRefusal(err error) error {
	e, ok := errdefs.As(err)
	if !ok {
		return err
	}
	field, code := "", ""
	switch e.Code {
	case "app_not_entitled":
		field, code = "/app_slug", CodeNotEntitled
	case "app_not_found":
		field, code = "/app_slug", CodeNotFound
	case "app_version_not_found":
		field, code = "/version", CodeNotFound
	case "version_not_launchable":
		field, code = "/version", CodeVersionNotLaunchable
	default:
		return err
	}
	return errdefs.Validation([]errdefs.FieldError{{Field: field, Code: code, Message: e.Message}})
}

// pinArtifacts finds, for every image the version runs, a registered
// artifact that is active, verified and not revoked, and pins its digest.
// A launchable_oci profile's image_ref is already pinned by digest; the
// artifact registry must vouch for exactly that digest.
func (s *Service) pinArtifacts(ctx context.Context, q Queries, v catalog.AppVersion, mv manifest.Version) (map[string]artifacts.AppArtifact, string, error) {
	all, err := q.AppArtifactsOfVersion(ctx, v.AppSlug, v.Version)
	if err != nil {
		return nil, "", err
	}
	pick := func(name, digest string) (artifacts.AppArtifact, *errdefs.FieldError) {
		revoked := false
		for _, a := range all {
			if (name != "" && a.ArtifactName != name) || (digest != "" && a.Digest != digest) || a.ArtifactKind != artifacts.KindOCI {
				continue
			}
			if a.Revoked() {
				revoked = true
				continue
			}
			if a.Launchable() {
				return a, nil
			}
		}
		what := name
		if what == "" {
			what = digest
		}
		if revoked {
			return artifacts.AppArtifact{}, &errdefs.FieldError{Field: "/version", Code: CodeArtifactRevoked,
				Message: fmt.Sprintf("artifact %s of %s %s was revoked; it can no longer be launched", what, v.AppSlug, v.Version)}
		}
		return artifacts.AppArtifact{}, &errdefs.FieldError{Field: "/version", Code: CodeArtifactNotReady,
			Message: fmt.Sprintf("artifact %s of %s %s is not registered as active and verified; register, verify and promote it first", what, v.AppSlug, v.Version)}
	}
	out := map[string]artifacts.AppArtifact{}
	prof := mv.RuntimeProfile
	switch prof.Kind {
	case manifest.ProfileLaunchableOCI:
		_, digest, ok := strings.Cut(prof.ImageRef, "@")
		if !ok {
			return nil, "", errdefs.Validation([]errdefs.FieldError{{Field: "/version", Code: CodeArtifactNotReady, Message: "the version's image is not pinned by digest"}})
		}
		a, fe := pick("", digest)
		if fe != nil {
			return nil, "", errdefs.Validation([]errdefs.FieldError{*fe})
		}
		out[""] = a
		return out, a.Digest, nil
	default:
		primary := ""
		var fes []errdefs.FieldError
		for _, svc := range prof.Topology.Services {
			if _, done := out[svc.Artifact]; done {
				continue
			}
			want := ""
			for _, ma := range mv.Artifacts {
				if ma.Name == svc.Artifact {
					want = ma.Digest
				}
			}
			a, fe := pick(svc.Artifact, want)
			if fe != nil {
				fes = append(fes, *fe)
				continue
			}
			out[svc.Artifact] = a
			if svc.Role == RolePrimary {
				primary = a.Digest
			}
		}
		if fes != nil {
			return nil, "", errdefs.Validation(fes[:1])
		}
		return out, primary, nil
	}
}

// placement checks (or picks) the allocation the instance runs on: one
// the version is compatible with and, when gpus asks, with the instance's
// GPUs free.
func (s *Service) placement(ctx context.Context, q Queries, p iam.Project, mv manifest.Version, eff catalog.Effective, allocationID string, gpus gpuCheck) (Allocation, error) {
	problems := func(a Allocation) ([]errdefs.FieldError, error) { return fits(ctx, q, mv, eff, a, gpus) }
	if s.Allocations == nil {
		return Allocation{}, errdefs.Validation([]errdefs.FieldError{{Field: "/target_allocation_id", Code: CodeNoAllocation,
			Message: "this server has no node allocations to launch onto"}})
	}
	if allocationID != "" {
		a, err := s.Allocations.Allocation(ctx, nil, allocationID)
		if errors.Is(err, storage.ErrNotFound) || (err == nil && a.ProjectID != p.ID) {
			// Another project's allocation is answered like a missing one.
			return Allocation{}, errdefs.Validation([]errdefs.FieldError{{Field: "/target_allocation_id", Code: CodeNotFound,
				Message: fmt.Sprintf("project %s has no allocation %q; list them with gpuaas allocation list --project %s (GET /api/v1/projects/%s/allocations)", p.ID, allocationID, p.ID, p.ID)}})
		}
		if err != nil {
			return Allocation{}, err
		}
		if !runnable(a.State) {
			return Allocation{}, errdefs.Validation([]errdefs.FieldError{{Field: "/target_allocation_id", Code: CodeAllocationNotActive,
				Message: fmt.Sprintf("allocation %s is %s; only an active (or pending) allocation can run an instance", a.ID, a.State)}})
		}
		fes, err := problems(a)
		if err != nil {
			return Allocation{}, err
		}
		if fes != nil {
			return Allocation{}, errdefs.Validation(fes)
		}
		return a, nil
	}
	all, err := s.Allocations.ProjectAllocations(ctx, nil, p.ID)
	if err != nil {
		return Allocation{}, err
	}
	var why []string
	for _, a := range all {
		if !runnable(a.State) {
			continue
		}
		fes, err := problems(a)
		if err != nil {
			return Allocation{}, err
		}
		if fes == nil {
			return a, nil
		}
		why = append(why, a.ID+": "+fes[0].Message)
	}
	msg := fmt.Sprintf("project %s has no active allocation this version can run on", p.ID)
	if why != nil {
		msg += " (" + strings.Join(why, "; ") + ")"
	}
	return Allocation{}, errdefs.Validation([]errdefs.FieldError{{Field: "/target_allocation_id", Code: CodeNoAllocation, Message: msg}})
}

// Compatible checks a version's compatibility rules and the effective
// resources against an allocation and its node's inventory; nil means the
// version can run there.
func Compatible(mv manifest.Version, eff catalog.Effective, a Allocation) []errdefs.FieldError {
	var fes []errdefs.FieldError
	bad := func(field, code, format string, args ...any) {
		fes = append(fes, errdefs.FieldError{Field: field, Code: code, Message: fmt.Sprintf(format, args...)})
	}
	if c := mv.Compatibility; c != nil {
		if len(c.RequiresCapacityShape) > 0 && !contains(c.RequiresCapacityShape, a.Shape) {
			bad("/target_allocation_id", CodeIncompatibleTarget, "allocation %s is a %s allocation; version %s needs one of %v", a.ID, a.Shape, mv.Version, c.RequiresCapacityShape)
		}
		if len(a.GPUUUIDs) < c.MinGPUCount {
			bad("/target_allocation_id", CodeIncompatibleTarget, "allocation %s holds %d GPU(s); version %s needs at least %d", a.ID, len(a.GPUUUIDs), mv.Version, c.MinGPUCount)
		}
		if c.RequiresExclusiveNode && a.Shape != nodes.ShapeBaremetal {
			bad("/target_allocation_id", CodeIncompatibleTarget, "version %s needs a whole node (a baremetal allocation); allocation %s is %s", mv.Version, a.ID, a.Shape)
		}
		if len(c.SupportedAccelerators) > 0 && !acceleratorFits(c.SupportedAccelerators, a) {
			bad("/target_allocation_id", CodeIncompatibleTarget, "the GPUs of allocation %s (%s) are none of the accelerators version %s supports (%v)", a.ID, gpuModels(a), mv.Version, c.SupportedAccelerators)
		}
	}
	r := eff.Resources
	if r.GPUCount > len(a.GPUUUIDs) {
		bad("/resources/gpu_count", CodeDoesNotFit, "gpu_count %d does not fit allocation %s, which holds %d GPU(s)", r.GPUCount, a.ID, len(a.GPUUUIDs))
	}
	if n := a.Inventory.CPUCores; r.CPUCores > 0 && n > 0 && r.CPUCores > n {
		bad("/resources/cpu_cores", CodeDoesNotFit, "cpu_cores %d does not fit node %s, which has %d cores", r.CPUCores, a.NodeID, n)
	}
	if m := a.Inventory.MemoryMiB; r.MemoryGiB > 0 && m > 0 && int64(r.MemoryGiB)*1024 > m {
		bad("/resources/memory_gib", CodeDoesNotFit, "memory_gib %d does not fit node %s, which has %d MiB", r.MemoryGiB, a.NodeID, m)
	}
	return fes
}

// acceleratorFits: the manifest names accelerator vendors (nvidia, amd,
// cpu); "cpu" runs anywhere, a vendor needs one of the allocation's GPUs
// to be that vendor's.
func acceleratorFits(accels []string, a Allocation) bool {
	if contains(accels, "cpu") {
		return true
	}
	for _, g := range a.Inventory.GPUs {
		if contains(a.GPUUUIDs, g.UUID) && contains(accels, strings.ToLower(g.Vendor)) {
			return true
		}
	}
	return false
}

func gpuModels(a Allocation) string {
	var ms []string
	for _, g := range a.Inventory.GPUs {
		if contains(a.GPUUUIDs, g.UUID) && !contains(ms, g.Model) {
			ms = append(ms, g.Model)
		}
	}
	if ms == nil {
		return "no GPUs"
	}
	return strings.Join(ms, ", ")
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// runnable reports whether instances may be placed on an allocation in
// state: active, or pending — placed, its node has yet to confirm it; the
// instance's tasks wait in that node's queue either way.
func runnable(state nodes.AllocationState) bool {
	return state == nodes.AllocActive || state == nodes.AllocPending
}

// reserveHostPort makes sure the host port an instance will publish on its
// node is not held by another instance there (one not yet decommissioned:
// a failed instance's container may still hold it). A port the request
// named is refused when held; the profile's default moves up to the next
// free port within the profile's bounds, and the choice is written into the
// instance's launch request, so every later deployment (upgrade, recovery)
// keeps it. A port the node picks (none requested or defaulted) is the
// node's to keep free.
//
// Two launches on one node at the same instant can still both pass (the
// agent then refuses the second at container start, with its reason);
// this closes the common case, a second launch of a default.
func (s *Service) reserveHostPort(ctx context.Context, tx Tx, inst *AppInstance, t target, req catalog.LaunchRequest) error {
	if inst.HostPort == 0 {
		return nil
	}
	held, err := tx.HostPortsHeld(ctx, inst.NodeID)
	if err != nil {
		return err
	}
	holder, taken := held[inst.HostPort]
	if !taken {
		return nil
	}
	lo, hi := inst.HostPort, inst.HostPort
	if b := hostPortBounds(t.manifest); b != nil && b.Max != nil {
		hi = *b.Max
	}
	if req.Resources.HostPort != nil {
		// The holder is named only when it is the project's own: a node
		// may carry allocations of other projects, and other tenants,
		// whose instances are not the caller's to know.
		by := "another project's app instance"
		if _, err := tx.GetAppInstance(ctx, inst.ProjectID, holder); err == nil {
			by = "app instance " + holder
		} else if !errors.Is(err, storage.ErrNotFound) {
			return err
		}
		return errdefs.Validation([]errdefs.FieldError{{Field: "/resources/host_port", Code: CodeHostPortInUse,
			Message: fmt.Sprintf("host port %d on node %s is held by %s; choose another (%d–%d), or leave host_port out to take the next free one",
				inst.HostPort, inst.NodeID, by, lo, hi)}})
	}
	for port := lo; port <= hi; port++ {
		if _, taken := held[port]; taken {
			continue
		}
		var doc LaunchDoc
		if err := json.Unmarshal(inst.Effective, &doc); err != nil {
			return err
		}
		doc.Request.Resources.HostPort = &port
		doc.Effective.Resources.HostPort = port
		if inst.Effective, err = json.Marshal(doc); err != nil {
			return err
		}
		inst.HostPort = port
		return nil
	}
	return errdefs.Validation([]errdefs.FieldError{{Field: "/resources/host_port", Code: CodeHostPortInUse,
		Message: fmt.Sprintf("every host port the version allows (%d–%d) is held on node %s; decommission an instance there, or launch onto another allocation",
			lo, hi, inst.NodeID)}})
}

// hostPortBounds reads the profile's host_port bounds (nil when none).
func hostPortBounds(mv manifest.Version) *manifest.Bounds {
	if p := mv.RuntimeProfile; p != nil && p.Resources != nil {
		return p.Resources.HostPort
	}
	return nil
}
