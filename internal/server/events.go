package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gpuaas/gpuaas/internal/events"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/worker"
)

// eventParts is the event pipeline of one replica: its NATS connection (an
// embedded server unless --nats-url), the relay and retention workers, and
// the reader that serves lists and streams.
type eventParts struct {
	conn    *events.Connection
	bus     *events.Bus
	hub     *events.Hub
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
		pw, err := loadOrCreateSecret(filepath.Join(a.Config.DataDir, "nats.password"))
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
	hub := &events.Hub{}
	eventLog := store.EventLog(a.DB)
	host, _ := os.Hostname()
	relay := &events.Relay{Log: eventLog, Bus: bus, Hub: hub, Holder: fmt.Sprintf("%s/%d/%s", host, os.Getpid(), randomHex(4)),
		LeaseTTL: cfg.LeaseTTL, Republish: min(cfg.DuplicateWindow/2, time.Minute), Interval: cfg.RelayInterval, Logger: a.Logger.With("component", "events.relay")}
	cleaner := &events.Cleaner{Log: eventLog, Relay: relay, Retention: cfg.Retention, Logger: a.Logger.With("component", "events.retention")}
	p := &eventParts{conn: conn, bus: bus, hub: hub, relay: relay, cleaner: cleaner,
		reader:  &events.Reader{Log: eventLog, Hub: hub, KeepAlive: cfg.KeepAlive, Reauthorize: cfg.Reauthorize, Poll: cfg.RelayInterval, WriteTimeout: cfg.WriteTimeout, Now: a.now},
		workers: worker.Group{relay, cleaner}}
	// Every replica wakes the relay (wherever it runs) on commit, and every
	// replica's streams wake when the relay has sequenced new rows.
	a.DB.OnEventsCommitted(func() { relay.Kick(); bus.NotifyCommitted() })
	if err := errors.Join(bus.OnCommitted(relay.Kick), bus.OnSequenced(hub.Notify)); err != nil {
		conn.Close()
		return nil, err
	}
	return p, nil
}

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
// first use.
func loadOrCreateSecret(path string) (string, error) {
	if b, err := os.ReadFile(path); err == nil {
		return strings.TrimSpace(string(b)), nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	s := randomHex(24)
	if err := os.WriteFile(path, []byte(s+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	return s, nil
}
