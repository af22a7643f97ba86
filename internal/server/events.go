package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gpuaas/gpuaas/internal/events"
	"github.com/gpuaas/gpuaas/internal/fsutil"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/wakeup"
	"github.com/gpuaas/gpuaas/internal/worker"
)

// eventParts is the event pipeline of one replica: its NATS connection (an
// embedded server unless --nats-url), the relay and retention workers, and
// the reader that serves lists and streams.
type eventParts struct {
	conn    *events.Connection
	bus     *events.Bus
	wake    *wakeup.Hub // every wake-up of this replica, linked to the others over NATS
	relay   *events.Relay
	cleaner *events.Cleaner
	reader  *events.Reader
	workers worker.Group
}

func (a *App) newEventParts(ctx context.Context) (*eventParts, error) {
	cfg := a.Config.Events
	nc := events.NATSConfig{URL: cfg.NATSURL, CredsFile: cfg.NATSCredsFile, NKeyFile: cfg.NATSNKeyFile,
		DataDir: a.Config.DataDir, Listen: cfg.NATSListen, Sync: cfg.NATSSync}
	if nc.URL == "" && nc.Listen != "" {
		pw, err := loadOrCreateSecret(filepath.Join(a.Config.DataDir, "nats.password"), a.Logger)
		if err != nil {
			return nil, err
		}
		nc.User, nc.Password = "gpuaas", pw
	}
	if nc.URL == "" && a.DB.Dialect() == store.Postgres {
		a.Logger.WarnContext(ctx, "NATS is embedded in this replica; with more than one replica set --nats-url to a shared NATS cluster")
	}
	conn, err := events.Connect(ctx, nc, a.Logger.With("component", "nats"))
	if err != nil {
		return nil, err
	}
	bus, err := events.NewBus(ctx, conn.NC, events.StreamSettings{Name: cfg.Stream, DuplicateWindow: cfg.DuplicateWindow, MaxAge: cfg.StreamMaxAge},
		a.Logger.With("component", "events"))
	if err != nil {
		conn.Close()
		return nil, err
	}
	// One wake-up path (internal/wakeup): task polls, event streams, the
	// relay and the caches that must forget all wait on this hub, and a
	// notify reaches every replica over this connection.
	wake, _, err := wakeup.NewNATS(conn.NC)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("wake-ups over NATS: %w", err)
	}
	eventLog := store.EventLog(a.DB)
	host, _ := os.Hostname()
	relay := &events.Relay{Log: eventLog, Bus: bus, Wake: wake, Holder: fmt.Sprintf("%s/%d/%s", host, os.Getpid(), randomHex(4)),
		LeaseTTL: cfg.LeaseTTL, Republish: min(cfg.DuplicateWindow/2, time.Minute), Interval: cfg.RelayInterval, Logger: a.Logger.With("component", "events.relay"), Now: a.now}
	cleaner := &events.Cleaner{Log: eventLog, Relay: relay, Retention: cfg.Retention, Logger: a.Logger.With("component", "events.retention"), Now: a.now}
	relay.OnLead = append(relay.OnLead, cleaner.Kick)
	p := &eventParts{conn: conn, bus: bus, wake: wake, relay: relay, cleaner: cleaner,
		reader:  &events.Reader{Log: eventLog, Wake: wake, KeepAlive: cfg.KeepAlive, Reauthorize: cfg.Reauthorize, Poll: cfg.RelayInterval, WriteTimeout: cfg.WriteTimeout, Now: a.now},
		workers: worker.Group{relay, cleaner}}
	// A commit with events wakes the relay wherever it runs; the relay's
	// sequencing wakes every replica's streams (wakeup.EventsSequenced).
	a.DB.OnEventsCommitted(func() { wake.Notify(wakeup.EventsCommitted) })
	wake.OnNotify(wakeup.EventsCommitted, relay.Kick)
	return p, nil
}

// Wake is this replica's wake-up hub, linked to every other replica.
func (a *App) Wake() *wakeup.Hub { return a.events.wake }

// Relay is this replica's outbox relay (tests wait on its passes).
func (a *App) Relay() *events.Relay { return a.events.relay }

// EventCleaner is this replica's outbox retention worker.
func (a *App) EventCleaner() *events.Cleaner { return a.events.cleaner }

// EventBus is this replica's NATS JetStream bus.
func (a *App) EventBus() *events.Bus { return a.events.bus }

func (p *eventParts) close() {
	if p == nil {
		return
	}
	p.workers.Stop()
	_ = p.bus.Close()
	p.conn.Close()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// loadOrCreateSecret reads a one-line secret file, minting it (0600) on
// first use. The file is written durably (fsutil), so a crash leaves either
// no file or the whole secret; an empty file (a crash of a build that wrote
// it in place) never held a password anyone could use, so it is treated as
// missing and replaced, with a warning.
func loadOrCreateSecret(path string, log *slog.Logger) (string, error) {
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		if s := strings.TrimSpace(string(b)); s != "" {
			return s, nil
		}
		log.Warn("the secret file is empty (a crash while it was written?); writing a new secret", "path", path)
		s := randomHex(24)
		if err := fsutil.WriteFile(path, []byte(s+"\n"), 0o600); err != nil {
			return "", fmt.Errorf("write %s: %w", path, err)
		}
		return s, nil
	case !errors.Is(err, os.ErrNotExist):
		return "", err
	}
	s := randomHex(24)
	if err := fsutil.CreateFile(path, []byte(s+"\n"), 0o600); errors.Is(err, os.ErrExist) {
		return loadOrCreateSecret(path, log) // written meanwhile
	} else if err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	return s, nil
}
