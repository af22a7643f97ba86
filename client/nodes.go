package client

import (
	"context"
	"encoding/json"
	"net/url"
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
	ID              string          `json:"id"`
	Name            string          `json:"name"`
	State           string          `json:"state"`
	KeyID           string          `json:"key_id"`
	GPUCount        int             `json:"gpu_count"`
	FreeGPUs        int             `json:"free_gpus"`
	GPUModel        string          `json:"gpu_model"`
	LiveAllocations int             `json:"live_allocations"`
	InventoryDigest string          `json:"inventory_digest"`
	Inventory       json.RawMessage `json:"inventory,omitempty"`
	Workloads       json.RawMessage `json:"workloads,omitempty"`
	GPUs            []NodeGPU       `json:"gpus,omitempty"`
	LastHeartbeatAt string          `json:"last_heartbeat_at"`
	StateChangedAt  string          `json:"state_changed_at"`
	CreatedAt       string          `json:"created_at"`
	UpdatedAt       string          `json:"updated_at"`
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

// CreateNodeJoinToken mints a single-use join token (ttlSeconds 0: the default).
func (c *Client) CreateNodeJoinToken(ctx context.Context, description string, ttlSeconds int) (NodeJoinToken, error) {
	var out NodeJoinToken
	in := map[string]any{"description": description}
	if ttlSeconds > 0 {
		in["ttl_seconds"] = ttlSeconds
	}
	return out, c.Do(ctx, "POST", "/api/v1/admin/nodes/join-tokens", nil, in, &out)
}

// ListNodes lists nodes (one page), optionally of one state.
func (c *Client) ListNodes(ctx context.Context, state, cursor string) ([]Node, string, error) {
	var out struct {
		Items      []Node `json:"items"`
		NextCursor string `json:"next_cursor"`
	}
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
func (c *Client) GetNode(ctx context.Context, id string) (Node, error) {
	var out Node
	return out, c.Do(ctx, "GET", "/api/v1/admin/nodes/"+url.PathEscape(id), nil, nil, &out)
}

// CreateAllocation places an allocation.
func (c *Client) CreateAllocation(ctx context.Context, in AllocationRequest) (Allocation, error) {
	var out Allocation
	return out, c.Do(ctx, "POST", "/api/v1/admin/allocations", nil, in, &out)
}

// ReleaseAllocation releases an allocation.
func (c *Client) ReleaseAllocation(ctx context.Context, id string) (Allocation, error) {
	var out Allocation
	return out, c.Do(ctx, "POST", "/api/v1/admin/allocations/"+url.PathEscape(id)+"/release", nil, map[string]any{}, &out)
}

// ListProjectAllocations lists a project's allocations (one page).
func (c *Client) ListProjectAllocations(ctx context.Context, projectID, state, cursor string) ([]Allocation, string, error) {
	var out struct {
		Items      []Allocation `json:"items"`
		NextCursor string       `json:"next_cursor"`
	}
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
func (c *Client) GetProjectAllocation(ctx context.Context, projectID, id string) (Allocation, error) {
	var out Allocation
	return out, c.Do(ctx, "GET", "/api/v1/projects/"+url.PathEscape(projectID)+"/allocations/"+url.PathEscape(id), nil, nil, &out)
}
