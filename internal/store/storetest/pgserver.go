package storetest

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// PrivatePostgres is a PostgreSQL server of a test's own, on a Unix socket
// in a temporary directory, for tests that stop and restart the database
// (the shared server of GPUAAS_TEST_DATABASE_URL serves other packages at
// the same time and must never go down).
type PrivatePostgres struct {
	t    testing.TB
	bin  string
	dir  string // data dir and socket dir
	cred *syscall.Credential
	cmd  *exec.Cmd
	done chan struct{}
}

// StartPostgres initialises and starts a private PostgreSQL, stopped at
// cleanup. It needs the server binaries of the machine's PostgreSQL (the
// ones GPUAAS_TEST_DATABASE_URL's server runs); without them the test skips
// loudly, and fails under CI=true.
func StartPostgres(t testing.TB) *PrivatePostgres {
	t.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	if len(bins) == 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("no PostgreSQL server binaries under /usr/lib/postgresql: this test must not skip in CI")
		}
		t.Skip("!!! SKIPPING: no PostgreSQL server binaries under /usr/lib/postgresql !!!")
	}
	p := &PrivatePostgres{t: t, bin: filepath.Dir(bins[len(bins)-1])}
	dir, err := os.MkdirTemp("", "gpuaas-pg-")
	if err != nil {
		t.Fatal(err)
	}
	p.dir = dir
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	// PostgreSQL refuses to run as root: run it as the postgres user.
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root and there is no postgres user to run PostgreSQL as: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		p.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := p.command("initdb", "-D", filepath.Join(dir, "data"), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	p.Start()
	t.Cleanup(p.Stop)
	return p
}

func (p *PrivatePostgres) command(name string, args ...string) *exec.Cmd {
	c := exec.Command(filepath.Join(p.bin, name), args...)
	c.Dir = p.dir
	if p.cred != nil {
		c.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	}
	return c
}

// URL is the server's postgres database over its socket.
func (p *PrivatePostgres) URL() string {
	return "postgres://postgres@/postgres?host=" + p.dir + "&sslmode=disable"
}

// Start starts the server (again) and waits until it accepts connections.
func (p *PrivatePostgres) Start() {
	p.t.Helper()
	p.cmd = p.command("postgres", "-D", filepath.Join(p.dir, "data"), "-k", p.dir, "-c", "listen_addresses=",
		"-c", "fsync=off", "-c", "max_connections=100")
	logf, err := os.Create(filepath.Join(p.dir, "postgres.log"))
	if err != nil {
		p.t.Fatal(err)
	}
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		p.t.Fatalf("start postgres: %v", err)
	}
	done := make(chan struct{})
	go func(c *exec.Cmd) { _ = c.Wait(); logf.Close(); close(done) }(p.cmd)
	p.done = done
	db, err := sql.Open("pgx", p.URL())
	if err != nil {
		p.t.Fatal(err)
	}
	defer db.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := db.PingContext(ctx)
		cancel()
		if err == nil {
			return
		}
		select {
		case <-done:
			log, _ := os.ReadFile(filepath.Join(p.dir, "postgres.log"))
			p.t.Fatalf("postgres exited at start:\n%s", log)
		default:
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("postgres did not accept connections within 30s: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // waiting on a process we started, nothing to subscribe to
	}
}

// Stop shuts the server down fast (SIGINT: open sessions are ended, as on
// a restart or failover) and waits for it to exit.
func (p *PrivatePostgres) Stop() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	p.cmd = nil
}

// String names the server for logs.
func (p *PrivatePostgres) String() string { return fmt.Sprintf("private postgres in %s", p.dir) }
