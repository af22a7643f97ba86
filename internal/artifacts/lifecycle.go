package artifacts

import (
	"slices"
	"strings"
)

// LifecycleState is where an artifact is in its lifecycle (DESIGN.md: one
// state machine).
type LifecycleState string

// Lifecycle states.
const (
	StateDraft      LifecycleState = "draft"
	StateStaged     LifecycleState = "staged"
	StateCanary     LifecycleState = "canary"
	StateActive     LifecycleState = "active"
	StateDeprecated LifecycleState = "deprecated"
	StateRetired    LifecycleState = "retired"
)

// TrustState is the outcome of an artifact's last verification.
type TrustState string

// Trust states.
const (
	TrustUnverified TrustState = "unverified"
	TrustVerified   TrustState = "verified"
	TrustFailed     TrustState = "failed"
)

// ValidTrust reports whether t is a trust state.
func ValidTrust(t TrustState) bool {
	return t == TrustUnverified || t == TrustVerified || t == TrustFailed
}

// transitions is the lifecycle graph: draft → staged → canary → active →
// deprecated → retired, with canary → staged as the rollback. Revocation
// is separate and terminal (from anywhere).
var transitions = map[LifecycleState][]LifecycleState{
	StateDraft:      {StateStaged},
	StateStaged:     {StateCanary},
	StateCanary:     {StateActive, StateStaged},
	StateActive:     {StateDeprecated},
	StateDeprecated: {StateRetired},
	StateRetired:    {},
}

// promotable are the targets of the promote endpoint (deprecate and retire
// have their own).
var promotable = []LifecycleState{StateStaged, StateCanary, StateActive}

// NextStates lists the states a state may move to.
func NextStates(state LifecycleState) []LifecycleState { return slices.Clone(transitions[state]) }

// CanTransition reports whether from → to is an edge of the lifecycle.
func CanTransition(from, to LifecycleState) bool { return slices.Contains(transitions[from], to) }

// ValidState reports whether s is a lifecycle state.
func ValidState(s LifecycleState) bool { _, ok := transitions[s]; return ok }

func describeNext(state LifecycleState) string {
	n := transitions[state]
	if len(n) == 0 {
		return "none (" + string(state) + " is final)"
	}
	return strings.Join(stateNames(n), ", ")
}

// stateNames is states as plain strings (error details keep plain strings).
func stateNames(states []LifecycleState) []string {
	out := make([]string, len(states))
	for i, t := range states {
		out[i] = string(t)
	}
	return out
}
