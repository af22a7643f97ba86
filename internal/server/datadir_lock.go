package server

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ErrDataDirLocked is returned when another process holds the data dir.
var ErrDataDirLocked = errors.New("data dir is in use")

// DataDirLock is the exclusive hold of one `gpuaas dev` on its data dir: two
// instances on one dir would share a SQLite file and overwrite each other's
// dev-credentials.json with dead ports.
type DataDirLock struct {
	f *os.File
}

func lockPath(dir string) string { return filepath.Join(dir, "gpuaas.lock") }

// LockDataDir takes an exclusive, non-blocking lock on dir. When another
// instance holds it, the error names that instance (from what it wrote into
// the lock file) and nothing in dir is modified.
func LockDataDir(dir string) (*DataDirLock, error) {
	f, err := os.OpenFile(lockPath(dir), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	if err := flock(f); err != nil {
		_ = f.Close()
		holder, _ := os.ReadFile(lockPath(dir))
		who := strings.TrimSpace(string(holder))
		if who == "" {
			who = "another gpuaas process"
		}
		return nil, fmt.Errorf("%w: %s is held by %s; stop it first or pass a different --data-dir", ErrDataDirLocked, dir, who)
	}
	l := &DataDirLock{f: f}
	if err := l.Describe(fmt.Sprintf("gpuaas dev (pid %d)", os.Getpid())); err != nil {
		_ = l.Close()
		return nil, err
	}
	return l, nil
}

// Describe records who holds the lock (pid, API URL) for the next comer's
// error message.
func (l *DataDirLock) Describe(s string) error {
	if err := l.f.Truncate(0); err != nil {
		return err
	}
	_, err := l.f.WriteAt([]byte(s+"\n"), 0)
	return err
}

// Close releases the lock (the kernel also releases it when the process dies).
func (l *DataDirLock) Close() error {
	if l == nil || l.f == nil {
		return nil
	}
	_ = l.f.Truncate(0)
	return l.f.Close()
}
