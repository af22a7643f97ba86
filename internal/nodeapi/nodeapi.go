// Package nodeapi re-exports the node wire contract, which lives beside the
// public Go client (github.com/gpuaas/gpuaas/client/nodeapi) so that
// the Go client can export it. Packages inside this module may import
// either; new code imports client/nodeapi. TestReexportsEverything keeps
// this list complete.
package nodeapi

import "github.com/gpuaas/gpuaas/client/nodeapi"

// The contract's types.
type (
	Inventory         = nodeapi.Inventory
	GPU               = nodeapi.GPU
	JoinRequest       = nodeapi.JoinRequest
	JoinResponse      = nodeapi.JoinResponse
	TokenRequest      = nodeapi.TokenRequest
	TokenResponse     = nodeapi.TokenResponse
	Heartbeat         = nodeapi.Heartbeat
	HeartbeatResponse = nodeapi.HeartbeatResponse
	Workload          = nodeapi.Workload
	Task              = nodeapi.Task
	TaskList          = nodeapi.TaskList
	ImagePull         = nodeapi.ImagePull
	PortMapping       = nodeapi.PortMapping
	Mount             = nodeapi.Mount
	ContainerRun      = nodeapi.ContainerRun
	Readiness         = nodeapi.Readiness
	ContainerRef      = nodeapi.ContainerRef
	ComposeUp         = nodeapi.ComposeUp
	ComposeDown       = nodeapi.ComposeDown
	TeardownVerify    = nodeapi.TeardownVerify
	TaskResult        = nodeapi.TaskResult
	RunOutput         = nodeapi.RunOutput
	VerifyOutput      = nodeapi.VerifyOutput
)

// Task kinds, result states, reason codes and ownership labels.
const (
	KindImagePull           = nodeapi.KindImagePull
	KindContainerRun        = nodeapi.KindContainerRun
	KindContainerStop       = nodeapi.KindContainerStop
	KindContainerRemove     = nodeapi.KindContainerRemove
	KindComposeUp           = nodeapi.KindComposeUp
	KindComposeDown         = nodeapi.KindComposeDown
	KindWorkloadInspect     = nodeapi.KindWorkloadInspect
	KindTeardownVerify      = nodeapi.KindTeardownVerify
	ResultSucceeded         = nodeapi.ResultSucceeded
	ResultFailed            = nodeapi.ResultFailed
	ReasonImagePullFailed   = nodeapi.ReasonImagePullFailed
	ReasonDigestMismatch    = nodeapi.ReasonDigestMismatch
	ReasonCredentialRefused = nodeapi.ReasonCredentialRefused
	ReasonContainerExited   = nodeapi.ReasonContainerExited
	ReasonReadinessTimeout  = nodeapi.ReasonReadinessTimeout
	ReasonInvalidTask       = nodeapi.ReasonInvalidTask
	ReasonEngineUnavailable = nodeapi.ReasonEngineUnavailable
	ReasonNotFound          = nodeapi.ReasonNotFound
	ReasonResourcesRemain   = nodeapi.ReasonResourcesRemain
	ReasonInsufficientGPUs  = nodeapi.ReasonInsufficientGPUs
	ReasonInternal          = nodeapi.ReasonInternal
	LabelManaged            = nodeapi.LabelManaged
	LabelInstance           = nodeapi.LabelInstance
	LabelTask               = nodeapi.LabelTask
	LabelProject            = nodeapi.LabelProject
	LabelNode               = nodeapi.LabelNode
	LabelOrg                = nodeapi.LabelOrg
	LabelApp                = nodeapi.LabelApp
	LabelVersion            = nodeapi.LabelVersion
)

// PinnedDigests is nodeapi.PinnedDigests.
func PinnedDigests(kind string, payload []byte) ([]string, error) {
	return nodeapi.PinnedDigests(kind, payload)
}
