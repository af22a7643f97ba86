package artifacts

import (
	"slices"
	"strings"
)

// Lifecycle states (DESIGN.md: one state machine).
const (
	StateDraft      = "draft"
	StateStaged     = "staged"
	StateCanary     = "canary"
	StateActive     = "active"
	StateDeprecated = "deprecated"
	StateRetired    = "retired"
)

// Trust states.
const (
	TrustUnverified = "unverified"
	TrustVerified   = "verified"
	TrustFailed     = "failed"
)

// transitions is the lifecycle graph: draft → staged → canary → active →
// deprecated → retired, with canary → staged as the rollback. Revocation
// is separate and terminal (from anywhere).
var transitions = map[string][]string{
	StateDraft:      {StateStaged},
	StateStaged:     {StateCanary},
	StateCanary:     {StateActive, StateStaged},
	StateActive:     {StateDeprecated},
	StateDeprecated: {StateRetired},
	StateRetired:    {},
}

// promotable are the targets of the promote endpoint (deprecate and retire
// have their own).
var promotable = []string{StateStaged, StateCanary, StateActive}

// NextStates lists the states a state may move to.
func NextStates(state string) []string { return slices.Clone(transitions[state]) }

// CanTransition reports whether from → to is an edge of the lifecycle.
func CanTransition(from, to string) bool { return slices.Contains(transitions[from], to) }

// ValidState reports whether s is a lifecycle state.
func ValidState(s string) bool { _, ok := transitions[s]; return ok }

func describeNext(state string) string {
	n := transitions[state]
	if len(n) == 0 {
		return "none (" + state + " is final)"
	}
	return strings.Join(n, ", ")
}
