package servertest

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/gpuaas/gpuaas/internal/config"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/gpuaas/gpuaas/internal/store/storetest"
)

// StartNATS runs one NATS server with JetStream for replicas to share.
func StartNATS(t testing.TB) string {
	t.Helper()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	t.Cleanup(ns.Shutdown)
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("NATS did not start")
	}
	return ns.ClientURL()
}

// TwoReplicas starts two servers over one PostgreSQL database and one NATS,
// as a production deployment runs them. The second replica's seeding resets
// the admin's password: use b.Admin() to sign in as the admin.
func TwoReplicas(t testing.TB, opts ...Option) (a, b *Server) {
	t.Helper()
	dbURL := storetest.URL(t, store.Postgres)
	natsURL := StartNATS(t)
	opts = append(opts, func(c *config.Config) { c.DatabaseURL, c.Events.NATSURL = dbURL, natsURL })
	a = Start(t, store.Postgres, opts...)
	b = Start(t, store.Postgres, opts...)
	return a, b
}
