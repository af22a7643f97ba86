// Package principal describes who is acting: a person, a service account or
// the platform itself, as established by authentication.
package principal

import "context"

// Type of an acting identity.
type Type string

const (
	User           Type = "user"
	ServiceAccount Type = "service_account"
	System         Type = "system"
	// Node is a GPU host's agent: it may call only its own node endpoints.
	Node      Type = "node"
	Anonymous Type = "anonymous"
)

// Principal is an authenticated identity. A service account is pinned to one
// project and can never act outside it.
type Principal struct {
	Type      Type
	ID        string
	Email     string // users only
	OrgID     string // service accounts: the org of their project
	ProjectID string // service accounts: their one project
}

// IsZero reports whether no identity is set.
func (p Principal) IsZero() bool { return p.ID == "" }

// Key is a stable string naming the principal (for idempotency scoping).
func (p Principal) Key() string { return string(p.Type) + ":" + p.ID }

type key struct{}

// With returns ctx carrying p.
func With(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, key{}, p)
}

// From returns the principal in ctx; Anonymous when none.
func From(ctx context.Context) Principal {
	if p, ok := ctx.Value(key{}).(Principal); ok {
		return p
	}
	return Principal{Type: Anonymous}
}

// SystemActor is the principal of platform-internal work (seeding, workers).
var SystemActor = Principal{Type: System, ID: "gpuaas"}
