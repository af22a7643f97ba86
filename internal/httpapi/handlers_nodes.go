package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/gpuaas/gpuaas/client/nodeapi"
	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/nodes"
)

type joinTokenView struct {
	ID        string `json:"id"`
	JoinToken string `json:"join_token,omitempty"`
	ExpiresAt string `json:"expires_at"`
	JoinURL   string `json:"join_url"`
}

type nodeGPUView struct {
	UUID      string `json:"uuid"`
	Index     int    `json:"index"`
	Model     string `json:"model"`
	Vendor    string `json:"vendor"`
	MemoryMiB int64  `json:"memory_mib"`
}

type nodeView struct {
	ID              string          `json:"id"`
	Name            string          `json:"name"`
	State           string          `json:"state"`
	DrainRequested  bool            `json:"drain_requested"`
	KeyID           string          `json:"key_id"`
	GPUCount        int             `json:"gpu_count"`
	FreeGPUs        int             `json:"free_gpus"`
	GPUModel        string          `json:"gpu_model"`
	LiveAllocations int             `json:"live_allocations"`
	InventoryDigest string          `json:"inventory_digest"`
	Inventory       json.RawMessage `json:"inventory,omitempty"`
	Workloads       json.RawMessage `json:"workloads,omitempty"`
	GPUs            []nodeGPUView   `json:"gpus,omitempty"`
	LastHeartbeatAt string          `json:"last_heartbeat_at"`
	StateChangedAt  string          `json:"state_changed_at"`
	CreatedAt       string          `json:"created_at"`
	UpdatedAt       string          `json:"updated_at"`
}

func viewNode(n nodes.Node) nodeView {
	return nodeView{ID: n.ID, Name: n.Name, State: string(n.State), DrainRequested: n.DrainRequested, KeyID: n.KeyID, GPUCount: n.GPUCount, FreeGPUs: n.FreeGPUs, GPUModel: n.GPUModel,
		LiveAllocations: n.LiveAllocations, InventoryDigest: n.InventoryDigest, LastHeartbeatAt: rfc3339(n.LastHeartbeatAt),
		StateChangedAt: rfc3339(n.StateChangedAt), CreatedAt: rfc3339(n.CreatedAt), UpdatedAt: rfc3339(n.UpdatedAt)}
}

func viewNodeDetail(n nodes.NodeView) nodeView {
	v := viewNode(n.Node)
	v.Inventory, v.Workloads = rawOrNull(n.Inventory), rawOrNull(n.Workloads)
	v.GPUs = make([]nodeGPUView, 0, len(n.GPUs))
	for _, g := range n.GPUs {
		v.GPUs = append(v.GPUs, nodeGPUView{UUID: g.UUID, Index: g.Index, Model: g.Model, Vendor: g.Vendor, MemoryMiB: g.MemoryMiB})
	}
	return v
}

type allocationView struct {
	ID         string   `json:"id"`
	OrgID      string   `json:"org_id"`
	ProjectID  string   `json:"project_id"`
	NodeID     string   `json:"node_id"`
	Shape      string   `json:"shape"`
	SKU        string   `json:"sku"`
	GPUCount   int      `json:"gpu_count"`
	GPUUUIDs   []string `json:"gpu_uuids"`
	State      string   `json:"state"`
	CreatedAt  string   `json:"created_at"`
	UpdatedAt  string   `json:"updated_at"`
	ReleasedAt *string  `json:"released_at"`
}

func viewAllocation(a nodes.Allocation) allocationView {
	v := allocationView{ID: a.ID, OrgID: a.OrgID, ProjectID: a.ProjectID, NodeID: a.NodeID, Shape: a.Shape, SKU: a.SKU, GPUCount: a.GPUCount,
		GPUUUIDs: a.GPUUUIDs, State: string(a.State), CreatedAt: rfc3339(a.CreatedAt), UpdatedAt: rfc3339(a.UpdatedAt)}
	if !a.ReleasedAt.IsZero() {
		r := rfc3339(a.ReleasedAt)
		v.ReleasedAt = &r
	}
	return v
}

func (a *API) createJoinToken(w http.ResponseWriter, r *http.Request) error {
	var in nodes.JoinTokenInput
	if r.ContentLength != 0 {
		if err := decode(r, &in); err != nil {
			return err
		}
	}
	t, err := a.Nodes.CreateJoinToken(r.Context(), grantsFrom(r.Context()), in)
	if err != nil {
		return err
	}
	v := joinTokenView{ID: t.ID, JoinToken: t.Token, ExpiresAt: rfc3339(t.ExpiresAt), JoinURL: a.publicURL() + "/api/v1/nodes/join"}
	red := v
	red.JoinToken = ""
	writeSecretJSON(w, http.StatusCreated, v, red)
	return nil
}

func (a *API) publicURL() string {
	if a.PublicURL == nil {
		return ""
	}
	return a.PublicURL()
}

func (a *API) listNodes(w http.ResponseWriter, r *http.Request) error {
	pg, err := page(r)
	if err != nil {
		return err
	}
	ns, next, err := a.Nodes.ListNodes(r.Context(), grantsFrom(r.Context()), nodes.NodeState(r.URL.Query().Get("state")), pg)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, mapList(ns, next, viewNode))
	return nil
}

func (a *API) getNode(w http.ResponseWriter, r *http.Request) error {
	n, err := a.Nodes.GetNode(r.Context(), grantsFrom(r.Context()), r.PathValue("node_id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, viewNodeDetail(n))
	return nil
}

func (a *API) drainNode(w http.ResponseWriter, r *http.Request) error {
	n, err := a.Nodes.Drain(r.Context(), grantsFrom(r.Context()), r.PathValue("node_id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, viewNodeDetail(n))
	return nil
}

func (a *API) removeNode(w http.ResponseWriter, r *http.Request) error {
	n, err := a.Nodes.Remove(r.Context(), grantsFrom(r.Context()), r.PathValue("node_id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, viewNodeDetail(n))
	return nil
}

// decodeWire reads an agent message. Unknown fields are ignored: the wire
// contract grows additively and a newer agent must still reach an older
// server.
func decodeWire(r *http.Request, v any) error {
	if err := json.NewDecoder(r.Body).Decode(v); err != nil {
		return decodeError(err)
	}
	return nil
}

func (a *API) joinNode(w http.ResponseWriter, r *http.Request) error {
	var in nodeapi.JoinRequest
	if err := decodeWire(r, &in); err != nil {
		return err
	}
	out, err := a.Nodes.Join(r.Context(), in)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}

func (a *API) nodeToken(w http.ResponseWriter, r *http.Request) error {
	var in nodeapi.TokenRequest
	if err := decodeWire(r, &in); err != nil {
		return err
	}
	tok, err := a.Nodes.Exchange(r.Context(), in.Assertion)
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, nodeapi.TokenResponse{AccessToken: tok.AccessToken, TokenType: tok.TokenType, ExpiresIn: tok.ExpiresIn})
	return nil
}

func (a *API) nodeHeartbeat(w http.ResponseWriter, r *http.Request) error {
	var hb nodeapi.Heartbeat
	if err := decodeWire(r, &hb); err != nil {
		return err
	}
	out, err := a.Nodes.Heartbeat(r.Context(), r.PathValue("node_id"), hb)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (a *API) pollNodeTasks(w http.ResponseWriter, r *http.Request) error {
	var wait time.Duration
	if v := r.URL.Query().Get("wait_seconds"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > int(nodes.MaxWait.Seconds()) {
			return errdefs.Invalid("invalid_wait", "wait_seconds must be an integer from 0 to %d", int(nodes.MaxWait.Seconds()))
		}
		wait = time.Duration(n) * time.Second
	}
	limit := 0
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 32 {
			return errdefs.Invalid("invalid_limit", "limit must be an integer from 1 to 32")
		}
		limit = n
	}
	// A long poll may wait as long as the server's write timeout: its
	// answer gets its own time to be written after the wait.
	ExtendDeadlines(w, wait+30*time.Second)
	ts, err := a.Nodes.PollTasks(r.Context(), r.PathValue("node_id"), wait, limit)
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, nodeapi.TaskList{Tasks: ts})
	return nil
}

func (a *API) nodeTaskResult(w http.ResponseWriter, r *http.Request) error {
	var res nodeapi.TaskResult
	if err := decodeWire(r, &res); err != nil {
		return err
	}
	if err := a.Nodes.ReportResult(r.Context(), r.PathValue("node_id"), r.PathValue("task_id"), res); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (a *API) createAllocation(w http.ResponseWriter, r *http.Request) error {
	var in nodes.AllocationInput
	if err := decode(r, &in); err != nil {
		return err
	}
	al, err := a.Nodes.CreateAllocation(r.Context(), grantsFrom(r.Context()), in)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, viewAllocation(al))
	return nil
}

func (a *API) listAllAllocations(w http.ResponseWriter, r *http.Request) error {
	pg, err := page(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	f := nodes.AllocationFilter{ProjectID: q.Get("project_id"), NodeID: q.Get("node_id"), State: nodes.AllocationState(q.Get("state"))}
	as, next, err := a.Nodes.ListAllocations(r.Context(), grantsFrom(r.Context()), f, pg)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, mapList(as, next, viewAllocation))
	return nil
}

func (a *API) releaseAllocation(w http.ResponseWriter, r *http.Request) error {
	al, err := a.Nodes.ReleaseAllocation(r.Context(), grantsFrom(r.Context()), r.PathValue("allocation_id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, viewAllocation(al))
	return nil
}

func (a *API) listProjectAllocations(w http.ResponseWriter, r *http.Request) error {
	pg, err := page(r)
	if err != nil {
		return err
	}
	as, next, err := a.Nodes.ProjectAllocations(r.Context(), grantsFrom(r.Context()), r.PathValue("project_id"), nodes.AllocationState(r.URL.Query().Get("state")), pg)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, mapList(as, next, viewAllocation))
	return nil
}

func (a *API) getProjectAllocation(w http.ResponseWriter, r *http.Request) error {
	al, err := a.Nodes.ProjectAllocation(r.Context(), grantsFrom(r.Context()), r.PathValue("project_id"), r.PathValue("allocation_id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, viewAllocation(al))
	return nil
}
