// Package compose runs platform-rendered Compose projects on the Docker
// Engine API (compose-go loads and validates them; no compose CLI).
package compose

import (
	"context"

	"github.com/gpuaas/gpuaas/internal/agent/docker"
	"github.com/gpuaas/gpuaas/internal/nodeapi"
)

// Up starts a project.
func Up(ctx context.Context, d *docker.Driver, o docker.Owner, u nodeapi.ComposeUp) (nodeapi.RunOutput, error) {
	return nodeapi.RunOutput{}, &docker.Failure{Reason: nodeapi.ReasonInvalidTask, Message: "compose.up is not supported by this agent yet"}
}

// Down removes a project.
func Down(ctx context.Context, d *docker.Driver, project, instanceID string) error {
	return &docker.Failure{Reason: nodeapi.ReasonInvalidTask, Message: "compose.down is not supported by this agent yet"}
}
