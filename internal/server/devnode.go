package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gpuaas/gpuaas/internal/nodes"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/store"
)

// DevAgentStarter starts an in-process node agent that joins apiURL with
// joinToken and keeps its state under dataDir; stop ends it. The node agent
// package (internal/agent) provides it; a build without it passes nil and
// dev mode runs without a node.
type DevAgentStarter func(ctx context.Context, apiURL, joinToken, dataDir string) (stop func(), err error)

// DevNode is what dev mode's node came to: a joined node with a baremetal
// dev allocation for the dev project, or the reason there is none.
type DevNode struct {
	NodeID       string
	AllocationID string
	GPUs         int
	Reason       string // why there is no node; empty when there is one
	Stop         func()
}

// DockerSocket is where dev mode looks for a Docker engine: DOCKER_HOST
// when it names a unix socket, else the default socket.
func DockerSocket() string {
	if h := os.Getenv("DOCKER_HOST"); strings.HasPrefix(h, "unix://") {
		return strings.TrimPrefix(h, "unix://")
	}
	return "/var/run/docker.sock"
}

// DockerAnswers reports whether a Docker engine answers _ping on socket.
func DockerAnswers(ctx context.Context, socket string) bool {
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		}}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://docker/_ping", nil)
	if err != nil {
		return false
	}
	resp, err := c.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// StartDevNode gives dev mode one node: when a Docker engine answers and
// start is set, it mints a join token, starts the in-process agent with it,
// waits for the node to be ready and holds the whole node for the dev
// project (a baremetal allocation, which a 0-GPU machine can host too). It
// needs the API serving, so run it beside Serve.
func (a *App) StartDevNode(ctx context.Context, start DevAgentStarter, creds DevCredentials, wait time.Duration) DevNode {
	socket := DockerSocket()
	if !DockerAnswers(ctx, socket) {
		return DevNode{Reason: "no Docker engine answers at " + socket + "; app instances cannot run, everything else works"}
	}
	if start == nil {
		return DevNode{Reason: "Docker answers, but this build has no in-process node agent"}
	}
	sctx := principal.With(ctx, principal.SystemActor)
	jt, err := a.Nodes.IssueJoinToken(sctx, "gpuaas dev node", 0)
	if err != nil {
		return DevNode{Reason: "join token: " + err.Error()}
	}
	stop, err := start(ctx, a.Config.PublicURL, jt.Token, filepath.Join(a.Config.DataDir, "agent"))
	if err != nil {
		return DevNode{Reason: "node agent: " + err.Error()}
	}
	n, err := a.waitDevNode(ctx, wait)
	if err != nil {
		stop()
		return DevNode{Reason: err.Error()}
	}
	dn := DevNode{NodeID: n.ID, GPUs: n.GPUCount, Stop: stop}
	for _, state := range []nodes.AllocationState{nodes.AllocActive, nodes.AllocPending} {
		live, _, err := a.DB.Queries().ListAllocations(ctx, nodes.AllocationFilter{ProjectID: creds.ProjectID, NodeID: n.ID, State: state}, store.Page{Limit: 1})
		if err == nil && len(live) > 0 {
			dn.AllocationID = live[0].ID
			return dn
		}
	}
	al, err := a.Nodes.Allocate(sctx, nil, nodes.AllocationInput{ProjectID: creds.ProjectID, Shape: nodes.ShapeBaremetal, SKU: "dev.baremetal", NodeID: n.ID})
	if err != nil {
		dn.Reason = "dev allocation: " + err.Error()
		return dn
	}
	dn.AllocationID = al.ID
	return dn
}

// waitDevNode waits for the newest node to be ready (the agent may be one
// that joined on an earlier run and kept its identity).
func (a *App) waitDevNode(ctx context.Context, wait time.Duration) (nodes.Node, error) {
	deadline := time.Now().Add(wait)
	for {
		ns, _, err := a.DB.Queries().ListNodes(ctx, nodes.StateReady, store.Page{Limit: store.MaxPageLimit})
		if err == nil && len(ns) > 0 {
			return ns[len(ns)-1], nil
		}
		if time.Now().After(deadline) {
			return nodes.Node{}, fmt.Errorf("the dev node did not become ready within %s", wait)
		}
		select {
		case <-ctx.Done():
			return nodes.Node{}, errors.Join(ctx.Err(), errors.New("dev node not ready"))
		case <-time.After(200 * time.Millisecond):
		}
	}
}
