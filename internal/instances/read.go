package instances

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"

	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/catalog"
	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/manifest"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// Access is how an operator reaches an instance's private host-local
// endpoint: on the node's loopback, through an ssh tunnel (or directly,
// when the node is this machine).
type Access struct {
	Exposure string `json:"exposure"` // private_host_local, or external_worker
	// URL is where an external worker says the app answers.
	URL          string `json:"url,omitempty"`
	NodeID       string `json:"node_id"`
	NodeAddress  string `json:"node_address,omitempty"`
	HostPort     int    `json:"host_port"`
	LocalURL     string `json:"local_url"`
	SSHTunnel    string `json:"ssh_tunnel,omitempty"`
	Instructions string `json:"instructions"`
	// BindAddress and Ports: every port the node bound, on which address
	// (the UI gateway finds the embedded UI's port among them).
	BindAddress string                `json:"bind_address,omitempty"`
	Ports       []nodeapi.PortMapping `json:"ports,omitempty"`
}

// access builds the access instructions from a run's output: the port is
// bound on the node at out.HostAddress (its loopback by default), and
// nodeAddress is how operators reach the node (its inventory's address).
func (s *Service) access(inst AppInstance, out nodeapi.RunOutput, nodeAddress string) []byte {
	if len(out.Ports) == 0 || out.Ports[0].Host == 0 {
		return nil
	}
	port := out.Ports[0].Host
	bind := out.HostAddress
	if bind == "" {
		bind = "127.0.0.1"
	}
	a := Access{Exposure: "private_host_local", NodeID: inst.NodeID, NodeAddress: nodeAddress, HostPort: port,
		LocalURL: fmt.Sprintf("http://127.0.0.1:%d/", port), BindAddress: out.HostAddress, Ports: out.Ports}
	// A node that advertises a loopback address (gpuaas dev, a
	// single-machine install) is this machine: no tunnel to open.
	if ip := net.ParseIP(nodeAddress); nodeAddress == "" || nodeAddress == "localhost" || (ip != nil && ip.IsLoopback()) {
		a.LocalURL = "http://" + net.JoinHostPort(bind, strconv.Itoa(port)) + "/"
		a.Instructions = fmt.Sprintf("The endpoint listens on this machine: open %s", a.LocalURL)
	} else {
		a.SSHTunnel = fmt.Sprintf("ssh -N -L %d:%s:%d <user>@%s", port, bind, port, nodeAddress)
		a.Instructions = fmt.Sprintf("The endpoint listens on the node's loopback only. Open a tunnel with `%s`, then browse %s", a.SSHTunnel, a.LocalURL)
	}
	b, _ := json.Marshal(a)
	return b
}

// Get returns one instance.
// An instance's own identity (instance_workload) reads that instance only;
// any other id answers as missing.
func (s *Service) Get(ctx context.Context, g *iam.Grants, projectID, id string) (AppInstance, error) {
	if p, err := s.IAM.Project(ctx, g, projectID, ""); err == nil {
		sc := iam.Scope{OrgID: p.OrgID, ProjectID: p.ID}
		if !g.Can(iam.PermInstanceRead, sc) && g.Can(iam.PermInstanceSelfRead, sc) {
			inst, err := s.Store.Read().GetAppInstance(ctx, p.ID, id)
			if errors.Is(err, storage.ErrNotFound) || (err == nil && (g.P.Type != principal.ServiceAccount || inst.ServiceAccountID != g.P.ID)) {
				return AppInstance{}, errInstanceNotFound(id)
			}
			return inst, err
		}
	}
	_, inst, err := s.instance(ctx, g, projectID, id, iam.PermInstanceRead)
	return inst, err
}

// List lists a project's instances, optionally in one status.
func (s *Service) List(ctx context.Context, g *iam.Grants, projectID string, status InstanceStatus, p storage.Page) ([]AppInstance, string, error) {
	pr, err := s.IAM.Project(ctx, g, projectID, iam.PermInstanceRead)
	if err != nil {
		return nil, "", err
	}
	if status != "" && !slices.Contains(Statuses, status) {
		return nil, "", errdefs.Invalid("invalid_status", "status must be one of %v", Statuses)
	}
	return s.Store.Read().ListAppInstances(ctx, pr.ID, status, p)
}

// Events pages through an instance's timeline.
// A tenant reading a platform-managed instance through its own project
// does not see the attachments of the other tenants it serves (as in
// Attachments): their rows are left out of its pages.
func (s *Service) Events(ctx context.Context, g *iam.Grants, projectID, id string, p storage.Page) ([]InstanceEvent, string, error) {
	pr, inst, err := s.instance(ctx, g, projectID, id, iam.PermInstanceRead)
	if err != nil {
		return nil, "", err
	}
	es, next, err := s.Store.Read().ListInstanceEvents(ctx, inst.ID, p)
	if err != nil || !platformManaged(inst.OperatingMode) || g.Can(iam.PermInstanceRead, ownerScope(inst)) {
		return es, next, err
	}
	out := make([]InstanceEvent, 0, len(es))
	for _, e := range es {
		if e.EventType == EventProjectAttached || e.EventType == EventProjectDetached {
			var d EventData
			if json.Unmarshal(e.Payload, &d) != nil || d.AttachedProjectID != pr.ID {
				continue
			}
		}
		out = append(out, e)
	}
	return out, next, nil
}

// Members lists what an instance runs on its node.
func (s *Service) Members(ctx context.Context, g *iam.Grants, projectID, id string, p storage.Page) ([]InstanceMember, string, error) {
	// As Get: the instance's own identity reads its members too (a
	// cluster app's controller follows its workers this way).
	inst, err := s.Get(ctx, g, projectID, id)
	if err != nil {
		return nil, "", err
	}
	return s.Store.Read().ListInstanceMembers(ctx, inst.ID, p)
}

// Operation returns one operation of a project.
func (s *Service) Operation(ctx context.Context, g *iam.Grants, projectID, id string) (InstanceOperation, error) {
	p, err := s.IAM.Project(ctx, g, projectID, iam.PermInstanceRead)
	if err != nil {
		return InstanceOperation{}, err
	}
	op, err := s.Store.Read().GetInstanceOperation(ctx, p.ID, id)
	if errors.Is(err, storage.ErrNotFound) {
		return op, errdefs.NotFound("operation_not_found", "operation %q does not exist in this project", id)
	}
	return op, err
}

// Logs returns the workload's last log lines the node reported (on a
// failure, or a reverted upgrade).
func (s *Service) Logs(ctx context.Context, g *iam.Grants, projectID, id string) (AppInstance, []string, error) {
	_, inst, err := s.instance(ctx, g, projectID, id, iam.PermInstanceRead)
	if err != nil {
		return inst, nil, err
	}
	lines := decodeTail(inst.LogTail)
	if lines == nil {
		lines = []string{}
	}
	return inst, lines, nil
}

// AccessOf decodes an instance's access instructions (nil when none).
func AccessOf(inst AppInstance) *Access {
	if len(inst.Access) == 0 {
		return nil
	}
	var a Access
	if json.Unmarshal(inst.Access, &a) != nil {
		return nil
	}
	return &a
}

// EffectiveOf decodes the effective launch values of an instance.
func EffectiveOf(inst AppInstance) LaunchDoc {
	var d LaunchDoc
	_ = json.Unmarshal(inst.Effective, &d)
	return d
}

// HistoryOf lists the versions an instance ran, oldest first.
func HistoryOf(inst AppInstance) []HistoryEntry { return history(inst) }

// Target is one of a project's allocations as a launch target of a version.
type Target struct {
	AllocationID string               `json:"allocation_id"`
	NodeID       string               `json:"node_id"`
	Shape        string               `json:"shape"`
	State        string               `json:"state"`
	GPUCount     int                  `json:"gpu_count"`
	Compatible   bool                 `json:"compatible"`
	Problems     []errdefs.FieldError `json:"problems"`
}

// Targets says which of a project's live allocations a version can run on
// with the effective launch values (launch preview uses it). The caller has
// checked the permission.
func (s *Service) Targets(ctx context.Context, projectID, appSlug, version string, eff catalog.Effective) ([]Target, error) {
	out := []Target{}
	if s.Allocations == nil {
		return out, nil
	}
	q := s.Store.Read()
	v, err := q.GetAppVersion(ctx, appSlug, version)
	if err != nil {
		return nil, err
	}
	var mv manifest.Version
	if err := json.Unmarshal(v.Manifest, &mv); err != nil {
		return nil, err
	}
	all, err := s.Allocations.ProjectAllocations(ctx, nil, projectID)
	if err != nil {
		return nil, err
	}
	for _, a := range all {
		t := Target{AllocationID: a.ID, NodeID: a.NodeID, Shape: a.Shape, State: string(a.State), GPUCount: len(a.GPUUUIDs), Problems: []errdefs.FieldError{}}
		if !runnable(a.State) {
			t.Problems = append(t.Problems, errdefs.FieldError{Field: "/target_allocation_id", Code: CodeAllocationNotActive,
				Message: fmt.Sprintf("allocation %s is %s", a.ID, a.State)})
		}
		fes, err := fits(ctx, q, mv, eff, a, gpuCheck{on: true})
		if err != nil {
			return nil, err
		}
		t.Problems = append(t.Problems, fes...)
		t.Compatible = len(t.Problems) == 0
		out = append(out, t)
	}
	return out, nil
}

// nodeAddress is the address the instance's node advertises to operators
// (its hostname when it advertises none), "" when unknown.
func (s *Service) nodeAddress(ctx context.Context, tx storage.Tx, inst AppInstance) string {
	al, err := s.Allocations.Allocation(ctx, tx, inst.TargetAllocationID)
	if err != nil {
		return ""
	}
	if al.Inventory.Address == "" {
		return al.Inventory.Hostname
	}
	return al.Inventory.Address
}
