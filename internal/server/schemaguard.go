package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/worker"
)

// schemaGuard keeps a replica from acting on a schema it was not built
// for. New refuses to start on one, but the schema can move under a
// running replica: an old replica left running while `gpuaas migrate`
// brings the schema forward, or a database restored from an older backup.
// Such a replica's background jobs write rows whose new columns they do
// not know (a relay built before an audience column publishes events to
// every attached tenant), and so do its API's writes. So every replica
// checks the schema version every --schema-check-interval (two
// single-row reads); while it differs from the binary's, either way, the
// guard stops the replica's background jobs and Writable refuses every
// state-changing request; when it matches again (the schema was migrated
// up to this binary) the jobs start again and writes are served.
//
// Reads go on: they change nothing a newer or older release must live
// with, /readyz (503 meanwhile) already takes the replica out of a load
// balancer that checks it, and refusing them would also cut the node
// agents' task polls and the open event streams while an operator is in
// the middle of the stop-migrate-start the upgrade asks for.
type schemaGuard struct {
	// check returns an error with SchemaGap when the schema is not the
	// binary's (store.DB.CheckSchema); any other error says nothing
	// about the schema and changes nothing.
	check  func(ctx context.Context) error
	logger *slog.Logger

	periodic worker.Periodic

	// gap is the schema error while paused, nil while running. Writable
	// reads it on every state-changing request, so it is set before the
	// jobs stop and never waits on a transition.
	gap atomic.Pointer[error]

	// mu serialises Start, Stop and the transitions (a Stop of the jobs
	// waits for their runs to end).
	mu   sync.Mutex
	ctx  context.Context // what Start got: the jobs' context when they restart
	jobs worker.Group
}

func newSchemaGuard(check func(context.Context) error, every time.Duration, logger *slog.Logger) *schemaGuard {
	g := &schemaGuard{check: check, logger: logger.With("component", "schema_guard")}
	g.periodic = worker.Periodic{Name: "schema-guard", Interval: every, Run: g.run, Logger: logger}
	return g
}

// Start starts jobs and the periodic check (which first runs at once).
// The jobs are named here, when the app is whole, not when the guard is
// built: a job appended to the app's list after that would never run.
func (g *schemaGuard) Start(ctx context.Context, jobs worker.Group) error {
	g.mu.Lock()
	g.ctx, g.jobs = ctx, jobs
	err := g.jobs.Start(ctx)
	g.mu.Unlock()
	if err != nil {
		return err
	}
	if err := g.periodic.Start(ctx); err != nil {
		g.Stop()
		return err
	}
	return nil
}

// Stop stops the check, then the jobs (a no-op while they are paused).
func (g *schemaGuard) Stop() {
	g.periodic.Stop()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.jobs.Stop()
}

// run is one check: it pauses or resumes the jobs on a change, logging
// each transition once, at error level while paused.
func (g *schemaGuard) run(ctx context.Context) error {
	err := g.check(ctx)
	var gap interface{ SchemaGap() (database, binary int) }
	if err != nil && !errors.As(err, &gap) {
		return err // unreadable: keep whatever state the last answer set
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	paused := g.gap.Load() != nil
	switch {
	case err != nil && !paused:
		g.gap.Store(&err) // refuse changes at once; the jobs stop below
		db, bin := gap.SchemaGap()
		g.logger.ErrorContext(ctx, "the database schema is not this binary's: background jobs paused and changes refused until it is",
			"database_schema", db, "binary_schema", bin, "what_to_do", whatToDo(db, bin))
		g.jobs.Stop()
	case err != nil:
		g.gap.Store(&err) // the versions may have moved again; still paused
	case paused:
		if err := g.jobs.Start(g.ctx); err != nil {
			return err // still paused: the next check tries again
		}
		g.gap.Store(nil)
		g.logger.InfoContext(ctx, "the database schema is this binary's again: background jobs resumed and changes served")
	}
	return nil
}

// Writable returns nil while the schema is the binary's (or has not been
// seen to differ), and otherwise the 503 a state-changing request gets.
func (g *schemaGuard) Writable() error {
	p := g.gap.Load()
	var gap interface{ SchemaGap() (database, binary int) }
	if p == nil || !errors.As(*p, &gap) {
		return nil
	}
	db, bin := gap.SchemaGap()
	return &errdefs.Error{Kind: errdefs.KindUnavailable, Code: "schema_mismatch",
		Message: fmt.Sprintf("this replica was built for database schema version %d but the database is at version %d, so it refuses changes (reads still work): %s",
			bin, db, whatToDo(db, bin))}
}

// Paused reports whether the guard holds the jobs stopped (tests).
func (g *schemaGuard) Paused() bool { return g.gap.Load() != nil }

// whatToDo names the operator's next step for a schema at db and a binary
// at bin.
func whatToDo(db, bin int) string {
	if db > bin {
		return "the database was migrated by a newer release; replace this replica with that release (or a later one)"
	}
	return "run `gpuaas migrate` with this release; the replica resumes by itself once the schema matches"
}
