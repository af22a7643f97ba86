package client

import (
	"context"
	"net/url"
	"strconv"

	"github.com/gpuaas/gpuaas/client/nodeapi"
)

// The node agent's side of the wire contract (client/nodeapi). The agent
// sets Token to a node access token for every call but JoinNode and
// NodeToken.

// JoinNode redeems a single-use join token.
//
// Operation: joinNode
func (c *Client) JoinNode(ctx context.Context, in nodeapi.JoinRequest) (nodeapi.JoinResponse, error) {
	var out nodeapi.JoinResponse
	return out, c.Do(ctx, "POST", "/api/v1/nodes/join", nil, in, &out, onceOnly)
}

// NodeToken exchanges a node-signed assertion for a node access token.
//
// Operation: exchangeNodeToken
func (c *Client) NodeToken(ctx context.Context, assertion string) (nodeapi.TokenResponse, error) {
	var out nodeapi.TokenResponse
	return out, c.Do(ctx, "POST", "/api/v1/nodes/token", nil, nodeapi.TokenRequest{Assertion: assertion}, &out, onceOnly)
}

func nodePath(nodeID string) string { return "/api/v1/nodes/" + url.PathEscape(nodeID) }

// NodeHeartbeat reports that the node is alive.
//
// Operation: nodeHeartbeat
func (c *Client) NodeHeartbeat(ctx context.Context, nodeID string, hb nodeapi.Heartbeat) (nodeapi.HeartbeatResponse, error) {
	var out nodeapi.HeartbeatResponse
	return out, c.Do(ctx, "POST", nodePath(nodeID)+"/heartbeat", nil, hb, &out)
}

// PollNodeTasks long-polls the node's task queue for up to waitSeconds.
//
// Operation: pollNodeTasks
func (c *Client) PollNodeTasks(ctx context.Context, nodeID string, waitSeconds int) ([]nodeapi.Task, error) {
	var out nodeapi.TaskList
	q := url.Values{"wait_seconds": {strconv.Itoa(waitSeconds)}}
	return out.Tasks, c.Do(ctx, "GET", nodePath(nodeID)+"/tasks", q, nil, &out)
}

// ReportNodeTaskResult reports how a task ended.
//
// Operation: reportNodeTaskResult
func (c *Client) ReportNodeTaskResult(ctx context.Context, nodeID, taskID string, r nodeapi.TaskResult) error {
	return c.Do(ctx, "POST", nodePath(nodeID)+"/tasks/"+url.PathEscape(taskID)+"/result", nil, r, nil)
}
