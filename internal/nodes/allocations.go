package nodes

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// AllocationInput asks for an allocation.
type AllocationInput struct {
	ProjectID string `json:"project_id"`
	Shape     string `json:"shape"` // gpu_slice (default) | baremetal
	SKU       string `json:"sku"`   // e.g. h100-80gb.1x; the .<N>x suffix gives gpu_count when it is omitted
	// GPUCount is how many GPUs a gpu_slice holds (0 is a CPU-only slice);
	// for baremetal the minimum the node must have.
	GPUCount        *int   `json:"gpu_count"`
	GPUModel        string `json:"gpu_model"`  // exact model, e.g. "NVIDIA H100 80GB HBM3"
	GPUVendor       string `json:"gpu_vendor"` // e.g. nvidia
	MinGPUMemoryMiB int64  `json:"min_gpu_memory_mib"`
	NodeID          string `json:"node_id"` // pin to one node
}

var skuRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)
var skuCountRE = regexp.MustCompile(`\.(\d{1,2})x$`)

// placementAttempts bounds how often a placement re-reads candidates after
// losing races for them.
const placementAttempts = 4

// maxPlacementWaits bounds how often one placement waits on nodes locked
// by concurrent placements before it answers from what it saw.
const maxPlacementWaits = 16

func errInsufficient(n int, shape string) error {
	what := fmt.Sprintf("%d free GPUs", n)
	if shape == ShapeBaremetal {
		what = "a whole free node"
	}
	return errdefs.FailedPrecondition("insufficient_capacity",
		"no ready node has %s matching the request; release allocations, join nodes, or relax gpu_model/gpu_vendor/min_gpu_memory_mib", what).
		WithDetails(map[string]any{"reason": "insufficient_gpus"})
}

var errRetry = errors.New("placement lost a race")

// errDeadlock: PostgreSQL aborted the placement to break a lock cycle with
// concurrent placements; it is retried up to maxPlacementDeadlocks times.
var errDeadlock = errors.New("placement deadlocked")

const maxPlacementDeadlocks = 16

// CreateAllocation places an allocation on a ready node with enough free
// GPUs matching the request and holds specific GPU UUIDs for it. It is
// `pending` until the node's next heartbeat confirms it (then `active`);
// its GPUs are held, and billed, from placement. Placement
// is one transaction per try: a conditional update takes the capacity from
// the node's row and the (node, GPU) primary key of allocation_gpus makes a
// GPU impossible to hold twice, on either dialect.
func (s *Service) CreateAllocation(ctx context.Context, g *iam.Grants, in AllocationInput) (Allocation, error) {
	if err := s.IAM.RequirePlatform(ctx, g, iam.PermAllocationsWrite, "allocation"); err != nil {
		return Allocation{}, err
	}
	return s.Allocate(ctx, g, in)
}

// Allocate places an allocation without the platform permission check: for
// the control plane itself (dev mode's allocation, other domains). g may be
// nil; the project must exist.
func (s *Service) Allocate(ctx context.Context, g *iam.Grants, in AllocationInput) (Allocation, error) {
	var fe []errdefs.FieldError
	if in.Shape == "" {
		in.Shape = ShapeGPUSlice
	}
	if in.Shape != ShapeGPUSlice && in.Shape != ShapeBaremetal {
		fe = append(fe, errdefs.FieldError{Field: "/shape", Code: "invalid", Message: "must be gpu_slice or baremetal"})
	}
	if !skuRE.MatchString(in.SKU) {
		fe = append(fe, errdefs.FieldError{Field: "/sku", Code: "invalid", Message: "is required: lowercase letters, digits, '.', '_', '-', such as h100-80gb.1x"})
	}
	count := 0
	if m := skuCountRE.FindStringSubmatch(in.SKU); m != nil {
		count, _ = strconv.Atoi(m[1])
	}
	if in.GPUCount != nil {
		if *in.GPUCount < 0 || *in.GPUCount > maxGPUs {
			fe = append(fe, errdefs.FieldError{Field: "/gpu_count", Code: "out_of_range", Message: fmt.Sprintf("must be between 0 and %d", maxGPUs)})
		}
		count = *in.GPUCount
	}
	if in.MinGPUMemoryMiB < 0 {
		fe = append(fe, errdefs.FieldError{Field: "/min_gpu_memory_mib", Code: "out_of_range", Message: "must not be negative"})
	}
	if len(in.GPUModel) > maxFieldLen || len(in.GPUVendor) > maxFieldLen {
		fe = append(fe, errdefs.FieldError{Field: "/gpu_model", Code: "too_long", Message: fmt.Sprintf("gpu_model and gpu_vendor are at most %d characters", maxFieldLen)})
	}
	if in.NodeID != "" {
		if _, err := uuid.Parse(in.NodeID); err != nil {
			fe = append(fe, errdefs.FieldError{Field: "/node_id", Code: "invalid", Message: "must be a node id (gpuaas node list)"})
		}
	}
	if in.ProjectID == "" {
		fe = append(fe, errdefs.FieldError{Field: "/project_id", Code: "required", Message: "is required: the project the allocation is for"})
	}
	if fe != nil {
		return Allocation{}, errdefs.Validation(fe)
	}
	p, err := s.project(ctx, g, in.ProjectID)
	if err != nil {
		return Allocation{}, err
	}
	req := PlacementQuery{GPUs: count, Baremetal: in.Shape == ShapeBaremetal, NodeID: in.NodeID, Model: in.GPUModel,
		Vendor: in.GPUVendor, MinMemoryMiB: in.MinGPUMemoryMiB}
	for attempt, deadlocks := 0, 0; attempt < placementAttempts; {
		a, err := s.place(ctx, p, in, req)
		switch {
		case errors.Is(err, errDeadlock) && deadlocks < maxPlacementDeadlocks:
			deadlocks++
			continue
		case errors.Is(err, errDeadlock):
			return Allocation{}, errdefs.Conflict("placement_contended",
				"placement kept deadlocking with concurrent placements; retry the request")
		case errors.Is(err, errRetry):
			attempt++
			continue
		}
		return a, err
	}
	return Allocation{}, errInsufficient(count, in.Shape)
}

// place picks and claims a node and its GPUs in one transaction.
func (s *Service) place(ctx context.Context, p iam.Project, in AllocationInput, req PlacementQuery) (Allocation, error) {
	now := s.Now()
	a := Allocation{ID: iam.NewID(), OrgID: p.OrgID, ProjectID: p.ID, Shape: in.Shape, SKU: in.SKU,
		State: AllocPending, CreatedBy: principal.From(ctx).Key(), CreatedAt: now, UpdatedAt: now}
	err := s.Store.Mutate(ctx, func(tx Tx) error {
		exclusive := ""
		if req.Baremetal {
			exclusive = a.ID
		}
		// First skip nodes other placements hold locked (PostgreSQL), so
		// concurrent requests spread out; finding none that way, wait for
		// them — as long as the committed state says something still fits.
		cl, err := tx.ClaimPlacement(ctx, req, exclusive, now, true)
		for i := 0; errors.Is(err, storage.ErrNotFound) && tx.Dialect() == storage.Postgres && i < maxPlacementWaits; i++ {
			if ok, perr := tx.PlacementPossible(ctx, req); perr != nil || !ok {
				break
			}
			cl, err = tx.ClaimPlacement(ctx, req, exclusive, now, false)
		}
		if errors.Is(err, storage.ErrNotFound) {
			return errInsufficient(req.GPUs, in.Shape)
		}
		if err != nil {
			return err
		}
		a.NodeID = cl.NodeID
		if req.Baremetal {
			// The whole node: every GPU must match and be free.
			if len(cl.Free) != cl.GPUCount || cl.GPUCount < req.GPUs {
				return errRetry
			}
		} else if len(cl.Free) < req.GPUs {
			return errRetry
		}
		a.GPUUUIDs = cl.Free
		if a.GPUUUIDs == nil {
			a.GPUUUIDs = []string{}
		}
		a.GPUCount = len(a.GPUUUIDs)
		// Billing (issue 13): GPU quota and spend budget, before anything is placed.
		if err := s.checkLaunch(ctx, tx, p.ID, a.GPUCount); err != nil {
			return err
		}
		if err := tx.InsertAllocation(ctx, a); err != nil {
			return err
		}
		if err := s.openInterval(ctx, tx, a, now); err != nil {
			return err
		}
		if err := tx.Emit(storage.Event{Type: EventAllocationPending, Subject: allocationSubject(a.ID), OrgID: a.OrgID, ProjectID: a.ProjectID},
			allocationData(a)); err != nil {
			return err
		}
		return tx.Audit(storage.AuditEvent{Action: "allocation.create", ResourceType: "allocation", ResourceID: a.ID,
			OrgID: a.OrgID, ProjectID: a.ProjectID}, nil, allocationData(a))
	})
	if errors.Is(err, storage.ErrAlreadyExists) {
		// A GPU hold collided with a concurrent placement's (the primary key
		// of allocation_gpus). On PostgreSQL the insert is held and sent
		// just before the commit (store held writes): this is where it shows.
		return Allocation{}, errRetry
	}
	if errors.Is(err, storage.ErrDeadlock) {
		// Waiting placements lock the rows they pass over in best-fit order;
		// two of them can wait on each other. PostgreSQL aborted one: it
		// holds nothing now, and trying again is safe.
		return Allocation{}, errDeadlock
	}
	if err != nil {
		return Allocation{}, err
	}
	s.Logger.InfoContext(ctx, "allocation placed", "allocation_id", a.ID, "node_id", a.NodeID, "gpus", a.GPUCount, "project_id", a.ProjectID)
	return a, nil
}

func allocationData(a Allocation) map[string]any {
	return map[string]any{"allocation_id": a.ID, "project_id": a.ProjectID, "node_id": a.NodeID, "shape": a.Shape, "sku": a.SKU,
		"gpu_count": a.GPUCount, "gpu_uuids": a.GPUUUIDs, "state": a.State}
}

func (s *Service) openInterval(ctx context.Context, tx Tx, a Allocation, now time.Time) error {
	return tx.OpenAllocationInterval(ctx, AllocationInterval{ID: iam.NewID(), AllocationID: a.ID, OrgID: a.OrgID,
		ProjectID: a.ProjectID, NodeID: a.NodeID, SKU: a.SKU, GPUCount: a.GPUCount, StartedAt: now})
}

// ReleaseAllocation ends an allocation. Whatever runs on it is torn down
// first (ReleaseHooks: the app-instance domain decommissions its instances):
// while that teardown runs the allocation is `releasing` — its billing
// interval is closed, its GPUs are still held — and it becomes `released`,
// its GPUs back on the node, once the teardown is done
// (AllocationTornDown). With nothing on it, it is released at once.
// Releasing a releasing allocation again retries what its teardown could
// not start before; releasing a released one changes nothing.
func (s *Service) ReleaseAllocation(ctx context.Context, g *iam.Grants, id string) (Allocation, error) {
	if err := s.IAM.RequirePlatform(ctx, g, iam.PermAllocationsWrite, "allocation"); err != nil {
		return Allocation{}, err
	}
	a, err := s.getAllocation(ctx, id)
	if err != nil {
		return Allocation{}, err
	}
	err = s.Store.Mutate(ctx, func(tx Tx) error {
		if _, err := tx.LockNode(ctx, a.NodeID); err != nil {
			return err
		}
		cur, err := tx.GetAllocation(ctx, id)
		if err != nil {
			return err
		}
		if cur.State == AllocReleased {
			a = cur
			return tx.Audit(storage.AuditEvent{Action: "allocation.release", ResourceType: "allocation", ResourceID: a.ID,
				OrgID: a.OrgID, ProjectID: a.ProjectID}, nil, allocationData(a))
		}
		// Releasing again runs the teardown hooks again: what they could not
		// start the first time (members of an instance that was busy) they
		// start now, and what is done already they leave alone.
		busy := false
		for _, h := range s.lifecycleHooks() {
			if rh, ok := h.(ReleaseHooks); ok {
				b, err := rh.AllocationReleasing(ctx, tx, cur)
				if err != nil {
					return err
				}
				busy = busy || b
			}
		}
		before := allocationData(cur)
		switch {
		case !busy:
			if a, err = s.release(ctx, tx, cur); err != nil {
				return err
			}
		case cur.State == AllocReleasing:
			a = cur // still waiting for its teardown
		default:
			now := s.Now()
			if err := tx.SetAllocationState(ctx, id, cur.State, AllocReleasing, now); err != nil {
				return err
			}
			if err := tx.CloseAllocationInterval(ctx, id, now); err != nil {
				return err
			}
			cur.State, cur.UpdatedAt = AllocReleasing, now
			a = cur
			if err := tx.Emit(storage.Event{Type: EventAllocationReleasing, Subject: allocationSubject(a.ID), OrgID: a.OrgID, ProjectID: a.ProjectID},
				allocationData(a)); err != nil {
				return err
			}
		}
		return tx.Audit(storage.AuditEvent{Action: "allocation.release", ResourceType: "allocation", ResourceID: a.ID,
			OrgID: a.OrgID, ProjectID: a.ProjectID}, before, allocationData(a))
	})
	if err != nil {
		return Allocation{}, err
	}
	return a, nil
}

// AllocationTornDown finishes the release of a releasing allocation once
// what ran on it is torn down: it becomes released and its GPUs go back to
// the node (event, audit row). It runs in the caller's transaction (the one
// that recorded the teardown) and does nothing for an allocation that is
// not releasing. It locks the node row first, as ReleaseAllocation does, so
// a teardown finishing while the release starts is seen by one of the two.
func (s *Service) AllocationTornDown(ctx context.Context, stx storage.Tx, allocationID string) error {
	tx := s.Store.Join(stx)
	a, err := tx.GetAllocation(ctx, allocationID)
	if errors.Is(err, storage.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if _, err := tx.LockNode(ctx, a.NodeID); err != nil {
		return err
	}
	if a, err = tx.GetAllocation(ctx, allocationID); err != nil || a.State != AllocReleasing {
		return err
	}
	before := allocationData(a)
	if a, err = s.release(ctx, tx, a); err != nil {
		return err
	}
	// The platform releases it, whoever's report finished the teardown
	// (that report is audited apart, as its own actor's).
	return tx.Audit(storage.AuditEvent{Action: "allocation.released", ResourceType: "allocation", ResourceID: a.ID,
		ActorType: string(principal.System), ActorID: principal.SystemActor.ID,
		OrgID: a.OrgID, ProjectID: a.ProjectID, Reason: "what ran on the allocation is torn down"}, before, allocationData(a))
}

// release marks cur released and returns its GPUs to the node; the caller
// holds the node row.
func (s *Service) release(ctx context.Context, tx Tx, cur Allocation) (Allocation, error) {
	now := s.Now()
	if err := tx.SetAllocationState(ctx, cur.ID, cur.State, AllocReleased, now); err != nil {
		return cur, err
	}
	if err := tx.FreeAllocationGPUs(ctx, cur.ID); err != nil {
		return cur, err
	}
	if err := tx.ReturnNodeCapacity(ctx, cur.NodeID, cur.ID, now); err != nil {
		return cur, err
	}
	if err := tx.CloseAllocationInterval(ctx, cur.ID, now); err != nil {
		return cur, err
	}
	cur.State, cur.UpdatedAt, cur.ReleasedAt = AllocReleased, now, now
	return cur, tx.Emit(storage.Event{Type: EventAllocationReleased, Subject: allocationSubject(cur.ID), OrgID: cur.OrgID, ProjectID: cur.ProjectID},
		allocationData(cur))
}

// confirm makes a node's pending allocations active: the node beat after
// they were placed on it. Their billing intervals run since placement.
func (s *Service) confirm(ctx context.Context, tx Tx, nodeID string, now time.Time) (int, error) {
	pending, err := tx.AllocationsOfNode(ctx, nodeID, AllocPending)
	if err != nil {
		return 0, err
	}
	for _, a := range pending {
		if err := tx.SetAllocationState(ctx, a.ID, AllocPending, AllocActive, now); err != nil {
			return 0, err
		}
		a.State = AllocActive
		if err := tx.Emit(storage.Event{Type: EventAllocationActive, Subject: allocationSubject(a.ID), OrgID: a.OrgID, ProjectID: a.ProjectID},
			allocationData(a)); err != nil {
			return 0, err
		}
	}
	return len(pending), tx.ClearNodePending(ctx, nodeID)
}

// activate moves an allocation from `from` to active and opens an interval.
func (s *Service) activate(ctx context.Context, tx Tx, a Allocation, from AllocationState, now time.Time) error {
	if err := tx.SetAllocationState(ctx, a.ID, from, AllocActive, now); err != nil {
		return err
	}
	a.State = AllocActive
	if err := s.openInterval(ctx, tx, a, now); err != nil {
		return err
	}
	return tx.Emit(storage.Event{Type: EventAllocationActive, Subject: allocationSubject(a.ID), OrgID: a.OrgID, ProjectID: a.ProjectID},
		allocationData(a))
}

func errAllocationNotFound(id string) error {
	return errdefs.NotFound("allocation_not_found", "allocation %q does not exist or you have no access to it", id)
}

func (s *Service) getAllocation(ctx context.Context, id string) (Allocation, error) {
	if _, err := uuid.Parse(id); err != nil {
		return Allocation{}, errAllocationNotFound(id)
	}
	a, err := s.Store.Read().GetAllocation(ctx, id)
	if errors.Is(err, storage.ErrNotFound) {
		return Allocation{}, errAllocationNotFound(id)
	}
	return a, err
}

// ListAllocations lists allocations platform-wide (admins), optionally of
// one project, node or state.
func (s *Service) ListAllocations(ctx context.Context, g *iam.Grants, f AllocationFilter, p storage.Page) ([]Allocation, string, error) {
	if err := s.IAM.RequirePlatform(ctx, g, iam.PermAllocationsRead, "allocation"); err != nil {
		return nil, "", err
	}
	return s.Store.Read().ListAllocations(ctx, f, p)
}

// ProjectAllocations lists a project's allocations (allocations.read).
func (s *Service) ProjectAllocations(ctx context.Context, g *iam.Grants, projectID string, state AllocationState, p storage.Page) ([]Allocation, string, error) {
	pr, err := s.IAM.Project(ctx, g, projectID, iam.PermAllocationsRead)
	if err != nil {
		return nil, "", err
	}
	return s.Store.Read().ListAllocations(ctx, AllocationFilter{ProjectID: pr.ID, State: state}, p)
}

// ProjectAllocation reads one allocation of a project.
func (s *Service) ProjectAllocation(ctx context.Context, g *iam.Grants, projectID, id string) (Allocation, error) {
	pr, err := s.IAM.Project(ctx, g, projectID, iam.PermAllocationsRead)
	if err != nil {
		return Allocation{}, err
	}
	a, err := s.getAllocation(ctx, id)
	if err != nil {
		return Allocation{}, err
	}
	if a.ProjectID != pr.ID {
		return Allocation{}, errAllocationNotFound(id)
	}
	return a, nil
}

// Allocation reads one allocation by id, for other domains (no policy).
func (s *Service) Allocation(ctx context.Context, id string) (Allocation, error) {
	return s.getAllocation(ctx, id)
}

// project resolves the project of an allocation: through the policy for a
// caller with grants, directly for the control plane itself.
func (s *Service) project(ctx context.Context, g *iam.Grants, id string) (iam.Project, error) {
	if g != nil {
		return s.IAM.Project(ctx, g, id, "")
	}
	if _, err := uuid.Parse(id); err != nil {
		return iam.Project{}, errdefs.NotFound("project_not_found", "project %q does not exist", id)
	}
	p, err := s.Store.Read().GetProject(ctx, id)
	if errors.Is(err, storage.ErrNotFound) {
		return iam.Project{}, errdefs.NotFound("project_not_found", "project %q does not exist", id)
	}
	return p, err
}
