package client

import (
	"context"
	"net/url"

	"github.com/gpuaas/gpuaas/client/nodeapi"
)

// NodeJoinToken is a new join token; JoinToken is shown once.
type NodeJoinToken struct {
	ID        string `json:"id"`
	JoinToken string `json:"join_token,omitempty"`
	ExpiresAt string `json:"expires_at"`
	JoinURL   string `json:"join_url"`
}

// Node is a GPU host as admins see it.
type Node struct {
	ID              string             `json:"id"`
	Name            string             `json:"name"`
	State           string             `json:"state"`
	DrainRequested  bool               `json:"drain_requested"` // a down node drained comes back draining
	KeyID           string             `json:"key_id"`
	GPUCount        int                `json:"gpu_count"`
	FreeGPUs        int                `json:"free_gpus"`
	GPUModel        string             `json:"gpu_model"`
	LiveAllocations int                `json:"live_allocations"`
	InventoryDigest string             `json:"inventory_digest"`
	Inventory       *nodeapi.Inventory `json:"inventory,omitempty"`
	Workloads       []nodeapi.Workload `json:"workloads,omitempty"`
	GPUs            []NodeGPU          `json:"gpus,omitempty"`
	LastHeartbeatAt string             `json:"last_heartbeat_at"`
	StateChangedAt  string             `json:"state_changed_at"`
	CreatedAt       string             `json:"created_at"`
	UpdatedAt       string             `json:"updated_at"`
}

// NodeGPU is one GPU of a node.
type NodeGPU struct {
	UUID      string `json:"uuid"`
	Index     int    `json:"index"`
	Model     string `json:"model"`
	Vendor    string `json:"vendor"`
	MemoryMiB int64  `json:"memory_mib"`
}

// Allocation is a project's hold on GPUs of a node (gpu_slice) or a whole node (baremetal).
type Allocation struct {
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

// AllocationRequest asks for an allocation (platform admins).
type AllocationRequest struct {
	ProjectID       string `json:"project_id"`
	Shape           string `json:"shape,omitempty"`
	SKU             string `json:"sku"`
	GPUCount        *int   `json:"gpu_count,omitempty"`
	GPUModel        string `json:"gpu_model,omitempty"`
	GPUVendor       string `json:"gpu_vendor,omitempty"`
	MinGPUMemoryMiB int64  `json:"min_gpu_memory_mib,omitempty"`
	NodeID          string `json:"node_id,omitempty"`
}

// NodeJoinTokenRequest asks for a join token; TTLSeconds 0 is the default
// (15 minutes).
type NodeJoinTokenRequest struct {
	Description string `json:"description,omitempty"`
	TTLSeconds  int    `json:"ttl_seconds,omitempty"`
}

// CreateNodeJoinToken mints a single-use join token (ttlSeconds 0: the default).
//
// Operation: createNodeJoinToken
func (c *Client) CreateNodeJoinToken(ctx context.Context, description string, ttlSeconds int) (NodeJoinToken, error) {
	var out NodeJoinToken
	in := NodeJoinTokenRequest{Description: description, TTLSeconds: ttlSeconds}
	return out, c.Do(ctx, "POST", "/api/v1/admin/nodes/join-tokens", nil, in, &out)
}

// ListNodes lists nodes (one page), optionally of one state.
//
// Operation: listNodes
func (c *Client) ListNodes(ctx context.Context, state, cursor string) ([]Node, string, error) {
	var out CatalogPage[Node]
	q := url.Values{}
	if state != "" {
		q.Set("state", state)
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	err := c.Do(ctx, "GET", "/api/v1/admin/nodes", q, nil, &out)
	return out.Items, out.NextCursor, err
}

// GetNode reads one node with its inventory and GPUs.
//
// Operation: getNode
func (c *Client) GetNode(ctx context.Context, id string) (Node, error) {
	var out Node
	return out, c.Do(ctx, "GET", "/api/v1/admin/nodes/"+url.PathEscape(id), nil, nil, &out)
}

// CreateAllocation places an allocation.
//
// Operation: createAllocation
func (c *Client) CreateAllocation(ctx context.Context, in AllocationRequest) (Allocation, error) {
	var out Allocation
	return out, c.Do(ctx, "POST", "/api/v1/admin/allocations", nil, in, &out)
}

// ReleaseAllocation releases an allocation.
//
// Operation: releaseAllocation
func (c *Client) ReleaseAllocation(ctx context.Context, id string) (Allocation, error) {
	var out Allocation
	return out, c.Do(ctx, "POST", "/api/v1/admin/allocations/"+url.PathEscape(id)+"/release", nil, map[string]any{}, &out)
}

// ListProjectAllocations lists a project's allocations (one page).
//
// Operation: listProjectAllocations
func (c *Client) ListProjectAllocations(ctx context.Context, projectID, state, cursor string) ([]Allocation, string, error) {
	var out CatalogPage[Allocation]
	q := url.Values{}
	if state != "" {
		q.Set("state", state)
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	err := c.Do(ctx, "GET", "/api/v1/projects/"+url.PathEscape(projectID)+"/allocations", q, nil, &out)
	return out.Items, out.NextCursor, err
}

// GetProjectAllocation reads one allocation of a project.
//
// Operation: getProjectAllocation
func (c *Client) GetProjectAllocation(ctx context.Context, projectID, id string) (Allocation, error) {
	var out Allocation
	return out, c.Do(ctx, "GET", "/api/v1/projects/"+url.PathEscape(projectID)+"/allocations/"+url.PathEscape(id), nil, nil, &out)
}

// DrainNode stops placing allocations on a node; what runs keeps running.
//
// Operation: drainNode
func (c *Client) DrainNode(ctx context.Context, id string) (Node, error) {
	var out Node
	return out, c.Do(ctx, "POST", "/api/v1/admin/nodes/"+url.PathEscape(id)+"/drain", nil, nil, &out)
}

// RemoveNode retires a node; its credentials stop working at once
// (release its allocations first).
//
// Operation: removeNode
func (c *Client) RemoveNode(ctx context.Context, id string) (Node, error) {
	var out Node
	return out, c.Do(ctx, "POST", "/api/v1/admin/nodes/"+url.PathEscape(id)+"/remove", nil, nil, &out)
}

// AllocationFilter narrows ListAllocations; empty fields match everything.
type AllocationFilter struct {
	ProjectID, NodeID, State string
	Limit                    int
	Cursor                   string
}

// ListAllocations lists allocations platform-wide (one page).
//
// Operation: listAllocations
func (c *Client) ListAllocations(ctx context.Context, f AllocationFilter) (CatalogPage[Allocation], error) {
	q := listQuery(map[string]string{"project_id": f.ProjectID, "node_id": f.NodeID, "state": f.State, "cursor": f.Cursor}, f.Limit)
	var out CatalogPage[Allocation]
	return out, c.Do(ctx, "GET", "/api/v1/admin/allocations", q, nil, &out)
}
