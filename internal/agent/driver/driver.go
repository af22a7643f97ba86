// Package driver is the seam between the node agent and the engine that
// runs its workloads: what the agent needs (pull, run a container or a
// Compose project, stop, remove, list what is labelled, inspect with logs,
// verify teardown, housekeeping), the types those calls share, and the
// failure with a reason code every call returns. agent/engine implements it
// on the Docker Engine API; agent/driver/drivertest has a fake for unit tests.
package driver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/gpuaas/gpuaas/client/nodeapi"
)

// Driver runs the gpuaas workloads of one node. Every call acts only on
// what carries the gpuaas ownership labels.
type Driver interface {
	// Ping reports whether the engine answers.
	Ping(ctx context.Context) error
	// Engine describes the engine for the node's inventory.
	Engine(ctx context.Context) (Engine, error)
	// Pull pulls an image by repository and digest and returns its reference.
	Pull(ctx context.Context, p nodeapi.ImagePull) (string, error)
	// Run starts one container of o (container.run); a container this task
	// already started is adopted. The output carries the digests the
	// engine records for what runs.
	Run(ctx context.Context, o Owner, r nodeapi.ContainerRun) (nodeapi.RunOutput, error)
	// ComposeImages lists the images (repository@digest) a compose.up
	// pulls or uses: those the task lists and those only its project's
	// services name. The agent holds them all before Up looks for them.
	ComposeImages(ctx context.Context, u nodeapi.ComposeUp) ([]string, error)
	// Up starts a Compose project of o (compose.up).
	Up(ctx context.Context, o Owner, u nodeapi.ComposeUp) (nodeapi.RunOutput, error)
	// Stop stops the referenced workloads; stopping what is gone succeeds.
	Stop(ctx context.Context, ref nodeapi.ContainerRef) error
	// Remove removes the referenced workloads; a reference to a whole
	// instance (no container named) also removes its scratch path.
	Remove(ctx context.Context, ref nodeapi.ContainerRef) error
	// Down removes a Compose project of an instance with its networks,
	// volumes and scratch path.
	Down(ctx context.Context, project, instanceID string) error
	// Inspect reports the referenced workloads with their last tail log lines.
	Inspect(ctx context.Context, ref nodeapi.ContainerRef, tail int) ([]nodeapi.Workload, []string, error)
	// Workloads lists every gpuaas-labelled workload of the engine.
	Workloads(ctx context.Context) ([]nodeapi.Workload, error)
	// Verify lists what still exists of an instance (empty: torn down);
	// with names, only which of those workloads (containers) remain.
	Verify(ctx context.Context, instanceID string, names []string) ([]string, error)
	// SetNodeID names the node whose label the driver writes (known once joined).
	SetNodeID(id string)
	// Housekeep removes labelled orphans and unused pulled images past
	// their grace periods.
	Housekeep(ctx context.Context) (Housekeeping, error)
	// Close releases the engine connection.
	Close() error
}

// Config is what the agent hands the driver it starts.
type Config struct {
	HostAddress string // where ports are published; 127.0.0.1 when empty
	DataDir     string // platform-owned files and scratch dirs live under DataDir/instances
	Unwrap      Unwrapper
	Logger      *slog.Logger
	// Known reports whether a labelled workload belongs to a task the agent
	// ran; others are orphans, removed after OrphanGrace.
	Known func(nodeapi.Workload) bool
	// Held reports whether an image reference is held for a run that has
	// not created its container yet: the pruner leaves it, past its grace
	// too (nil holds nothing).
	Held func(ref string) bool
	// RemoveUnheld calls remove unless ref is held (held is then true),
	// and no hold can be taken until remove returned: the pruner removes
	// through it, since a run may take its hold after the pruner's look at
	// Held (nil: remove is called on Held's word alone).
	RemoveUnheld    func(ref string, remove func() error) (held bool, err error)
	OrphanGrace     time.Duration
	ImagePruneGrace time.Duration
}

// New starts a driver.
type New func(Config) (Driver, error)

// Owner says whom a workload belongs to; it becomes the ownership labels.
type Owner struct {
	TaskID, InstanceID, ProjectID string
}

// Engine describes a container engine.
type Engine struct {
	Version, APIVersion string
	Runtimes            []string
}

// Housekeeping is what one housekeeping pass removed.
type Housekeeping struct {
	Removed []nodeapi.Workload // orphans
	// The orphan Compose project networks and volumes removed, by name.
	RemovedNetworks []string
	RemovedVolumes  []string
	PrunedImages    []string
}

// Credentials are registry credentials for one pull.
type Credentials struct {
	Username, Password, Registry string
}

// Unwrapper turns a node-bound wrapping token into registry credentials.
type Unwrapper func(ctx context.Context, wrappingToken string) (Credentials, error)

// Failure is a task failure with a deterministic reason code.
type Failure struct {
	Reason  string
	Message string
	LogTail []string
}

func (f *Failure) Error() string { return f.Reason + ": " + f.Message }

// Fail is a Failure with a formatted message.
func Fail(reason, format string, args ...any) *Failure {
	return &Failure{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// AsFailure extracts a Failure from err (nil for nil); other errors are
// engine or internal failures.
func AsFailure(err error) *Failure {
	if err == nil {
		return nil
	}
	var f *Failure
	if errors.As(err, &f) {
		return f
	}
	return &Failure{Reason: nodeapi.ReasonInternal, Message: err.Error()}
}
