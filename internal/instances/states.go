package instances

// InstanceStatus is where an instance is in its lifecycle.
type InstanceStatus string

// Instance lifecycle states (the seeds' names).
const (
	StatusRequested       InstanceStatus = "requested"
	StatusDeploying       InstanceStatus = "deploying"
	StatusRunning         InstanceStatus = "running"
	StatusUpgrading       InstanceStatus = "upgrading"
	StatusRollingBack     InstanceStatus = "rolling_back"
	StatusDecommissioning InstanceStatus = "decommissioning"
	StatusDecommissioned  InstanceStatus = "decommissioned"
	StatusFailed          InstanceStatus = "failed"
)

// Statuses lists every state in lifecycle order.
var Statuses = []InstanceStatus{StatusRequested, StatusDeploying, StatusRunning, StatusUpgrading, StatusRollingBack,
	StatusDecommissioning, StatusDecommissioned, StatusFailed}

// Event types every transition emits (the seeds' names).
const (
	EventRequested             = "apps.instance.requested"
	EventDeploying             = "apps.instance.deploying"
	EventRunning               = "apps.instance.running"
	EventUpgradeRequested      = "apps.instance.upgrade_requested"
	EventUpgraded              = "apps.instance.upgraded"
	EventRollbackRequested     = "apps.instance.rollback_requested"
	EventRolledBack            = "apps.instance.rolled_back"
	EventDecommissionRequested = "apps.instance.decommission_requested"
	EventDecommissioned        = "apps.instance.decommissioned"
	EventFailed                = "apps.instance.failed"
)

// EventTypes lists the event types in the seeds' order.
var EventTypes = []string{EventRequested, EventDeploying, EventRunning, EventUpgradeRequested, EventUpgraded,
	EventRollbackRequested, EventRolledBack, EventDecommissionRequested, EventDecommissioned, EventFailed}

// Deterministic reason codes an instance (or its operation) carries. The
// node-side codes are nodeapi's; these add what only the control plane
// knows.
const (
	ReasonImagePullFailed    = "image_pull_failed"
	ReasonArtifactRevoked    = "artifact_revoked"
	ReasonReadinessTimeout   = "readiness_timeout"
	ReasonContainerExited    = "container_exited"
	ReasonNodeLost           = "node_lost"
	ReasonAllocationReleased = "allocation_released"
	ReasonAllocationLost     = "allocation_lost"
	ReasonUpgradeReverted    = "upgrade_reverted"
	ReasonRenderFailed       = "render_failed"
	ReasonTeardownIncomplete = "teardown_incomplete"
	ReasonDeployFailed       = "deploy_failed"
)

// OperationKind is what a lifecycle operation does.
type OperationKind string

// Operation kinds.
const (
	OpCreate       OperationKind = "create"
	OpUpgrade      OperationKind = "upgrade"
	OpRollback     OperationKind = "rollback"
	OpDecommission OperationKind = "decommission"
	// Member operations (members.go): the instance stays running.
	OpMemberAdd     OperationKind = "member_add"
	OpMemberRemove  OperationKind = "member_remove"
	OpMemberRecover OperationKind = "member_recover"
	// OpCleanup removes what a failed or timed-out worker operation may
	// have left (external.go: orphan mitigation).
	OpCleanup OperationKind = "cleanup"
)

// Who carries an operation out.
const (
	ExecutorPlatform = "platform" // the driver, through node agents
	ExecutorWorker   = "worker"   // an external worker of the app
)

// memberOp reports whether k acts on added members rather than on the
// instance's own deployment.
func memberOp(k OperationKind) bool {
	return k == OpMemberAdd || k == OpMemberRemove || k == OpMemberRecover
}

// OperationState is where an operation is.
type OperationState string

// Operation states.
const (
	OpInProgress OperationState = "in_progress"
	OpSucceeded  OperationState = "succeeded"
	OpFailed     OperationState = "failed"
)

// MemberStatus is where one workload of an instance is on its node.
type MemberStatus string

// Member states.
const (
	MemberDeploying MemberStatus = "deploying"
	MemberRunning   MemberStatus = "running"
	MemberFailed    MemberStatus = "failed"
	MemberRemoved   MemberStatus = "removed"
)

// RolePrimary is the member role of a version's primary image.
const RolePrimary = "primary"

// Events of added members (members.go).
const (
	EventMemberAdded     = "apps.instance.member_added"
	EventMemberRemoved   = "apps.instance.member_removed"
	EventMemberFailed    = "apps.instance.member_failed"
	EventMemberRecovered = "apps.instance.member_recovered"
)

// MemberEventTypes lists the member events.
var MemberEventTypes = []string{EventMemberAdded, EventMemberRemoved, EventMemberFailed, EventMemberRecovered}

// OperationPhase is an operation's durable cursor in the worker. Each phase
// either queues node tasks (and moves on) or waits for the task it queued.
type OperationPhase string

const (
	phaseStart            OperationPhase = "start"        // nothing queued yet
	phaseRemoveOld                       = "remove_old"   // waiting for the previous workload's removal
	phaseRun                             = "run"          // waiting for the new workload's run task
	phaseRevertClean                     = "revert_clean" // upgrade failed: waiting for the failed workload's removal
	phaseRevertRun                       = "revert_run"   // waiting for the previous version's run task
	phaseAwaitStart                      = "await_start"  // run succeeded; waiting for the workload's start_completed
	phaseRevertAwaitStart                = "revert_await_start"
	phaseTeardown                        = "teardown" // waiting for container/compose removal
	phaseVerify                          = "verify"   // waiting for teardown.verify
	phaseDone                            = "done"
)

// busy reports whether a lifecycle operation is under way in status s.
func busy(s InstanceStatus) bool {
	switch s {
	case StatusRequested, StatusDeploying, StatusUpgrading, StatusRollingBack, StatusDecommissioning:
		return true
	}
	return false
}

// HealthState is how a running instance's workload says it is.
type HealthState string

// Health states. Unknown until the workload reports; degraded when the
// version declares a heartbeat timeout and no heartbeat came in time.
const (
	HealthUnknown   HealthState = "unknown"
	HealthHealthy   HealthState = "healthy"
	HealthUnhealthy HealthState = "unhealthy"
	HealthDegraded  HealthState = "degraded"
)

// HealthStates lists every health state.
var HealthStates = []HealthState{HealthUnknown, HealthHealthy, HealthUnhealthy, HealthDegraded}

// Events of what a workload reports about itself (runtimeevents.go).
const (
	// EventHealthChanged: the instance's health moved (data: from, to,
	// reason).
	EventHealthChanged = "apps.instance.health_changed"
	// EventRuntimeReported: the workload reported runtime events other
	// than heartbeats (start_completed, member changes, health).
	EventRuntimeReported = "apps.instance.runtime_reported"
)

// Health reasons the platform sets itself.
const (
	ReasonHeartbeatMissed  = "heartbeat_missed"
	ReasonHeartbeatResumed = "heartbeat_resumed"
)
