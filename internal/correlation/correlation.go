// Package correlation carries the correlation id of the work in flight
// through a context: from the HTTP request into logs, audit rows and events.
package correlation

import (
	"context"

	"github.com/google/uuid"
)

type key struct{}

// With returns ctx carrying id.
func With(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, key{}, id)
}

// ID returns the correlation id in ctx, or "".
func ID(ctx context.Context) string {
	id, _ := ctx.Value(key{}).(string)
	return id
}

// New returns a fresh correlation id.
func New() string { return uuid.NewString() }
