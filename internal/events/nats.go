package events

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// NATSConfig says where the bus is: an external cluster (URL set) or a
// server embedded in this process with its file store under DataDir.
type NATSConfig struct {
	URL       string // nats://host:4222[,nats://…]; empty embeds a server
	CredsFile string // external: a .creds file (JWT + nkey seed)
	NKeyFile  string // external: an nkey seed file
	DataDir   string // embedded: JetStream store is <DataDir>/nats
	// Listen, when set, opens the embedded server on a loopback host:port
	// for the nats CLI, guarded by User and Password.
	Listen         string
	User, Password string
	// Sync is the embedded store's fsync policy: "" (NATS default: fsync
	// every 2 minutes), "always" (fsync every write), or a Go duration.
	Sync string
}

// Connection is an open NATS connection and, when embedded, its server.
type Connection struct {
	NC     *nats.Conn
	Server *server.Server // nil for an external cluster
	closed chan struct{}  // closed by the client's last callback
}

// Close closes the connection and shuts the embedded server down.
func (c *Connection) Close() {
	if c.NC != nil {
		c.NC.Close()
		// The client runs its callbacks (which log) on its own goroutine;
		// wait for the last one so nothing logs after Close returns.
		select {
		case <-c.closed:
		case <-time.After(5 * time.Second):
		}
	}
	if c.Server != nil {
		c.Server.Shutdown()
		c.Server.WaitForShutdown()
	}
}

// Connect opens the configured NATS. An external cluster that is down does
// not fail startup: the client keeps reconnecting and the relay retries.
func Connect(ctx context.Context, cfg NATSConfig, logger *slog.Logger) (*Connection, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	closed := make(chan struct{})
	opts := []nats.Option{
		nats.Name("gpuaas"),
		nats.ClosedHandler(func(*nats.Conn) { close(closed) }),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.RetryOnFailedConnect(true),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil { // nil: our own Close
				logger.Warn("nats disconnected", "error", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { logger.Info("nats reconnected", "server", nc.ConnectedUrlRedacted()) }),
	}
	if cfg.URL != "" {
		if cfg.CredsFile != "" {
			opts = append(opts, nats.UserCredentials(cfg.CredsFile))
		}
		if cfg.NKeyFile != "" {
			o, err := nats.NkeyOptionFromSeed(cfg.NKeyFile)
			if err != nil {
				return nil, fmt.Errorf("nats nkey: %w", err)
			}
			opts = append(opts, o)
		}
		nc, err := nats.Connect(cfg.URL, opts...)
		if err != nil {
			return nil, fmt.Errorf("connect to nats %s: %w", cfg.URL, err)
		}
		return &Connection{NC: nc, closed: closed}, nil
	}
	ns, err := embedded(cfg)
	if err != nil {
		return nil, err
	}
	opts = append(opts, nats.InProcessServer(ns))
	if cfg.Listen != "" {
		opts = append(opts, nats.UserInfo(cfg.User, cfg.Password))
	}
	nc, err := nats.Connect("", opts...)
	if err != nil {
		ns.Shutdown()
		return nil, fmt.Errorf("connect to embedded nats: %w", err)
	}
	return &Connection{NC: nc, Server: ns, closed: closed}, nil
}

func embedded(cfg NATSConfig) (*server.Server, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("embedded nats needs a data dir")
	}
	o := &server.Options{
		ServerName: "gpuaas-embedded",
		JetStream:  true,
		StoreDir:   filepath.Join(cfg.DataDir, "nats"),
		NoSigs:     true,
		NoLog:      true,
		DontListen: cfg.Listen == "",
	}
	switch cfg.Sync {
	case "":
	case "always":
		o.SyncAlways = true
	default:
		d, err := time.ParseDuration(cfg.Sync)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("nats sync %q: want always or a duration such as 1s", cfg.Sync)
		}
		o.SyncInterval = d
	}
	if cfg.Listen != "" {
		host, port, err := net.SplitHostPort(cfg.Listen)
		if err != nil {
			return nil, fmt.Errorf("embedded nats listen %q: %w", cfg.Listen, err)
		}
		o.Host = host
		if o.Port, err = strconv.Atoi(port); err != nil {
			return nil, fmt.Errorf("embedded nats listen %q: bad port", cfg.Listen)
		}
		if cfg.User == "" || cfg.Password == "" {
			return nil, errors.New("embedded nats listener needs a user and password")
		}
		o.Username, o.Password = cfg.User, cfg.Password
	}
	ns, err := server.NewServer(o)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, errors.New("embedded nats did not become ready in 10s")
	}
	return ns, nil
}
