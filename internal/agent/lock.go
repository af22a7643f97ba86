package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// lockFile is held (flock) by the one agent running on a data dir: two
// agents on one dir would share a node identity and each other's task
// records, and each would remove the other's workloads as orphans.
const lockFile = "agent.lock"

// lockDataDir takes the data dir for this process or says which agent
// holds it; nothing in dir is modified when it is held.
func lockDataDir(dir string) (*os.File, error) {
	p := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("data dir lock: %w", err)
	}
	if err := flock(f); err != nil {
		_ = f.Close()
		holder, _ := os.ReadFile(p)
		pid := strings.TrimSpace(string(holder))
		if pid == "" {
			pid = "unknown"
		}
		return nil, fmt.Errorf("data dir %s is held by another running gpuaas agent (pid %s): stop it first or pass a different --data-dir", dir, pid)
	}
	if err := f.Truncate(0); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("data dir lock: %w", err)
	}
	if _, err := f.WriteAt([]byte(fmt.Sprintf("%d\n", os.Getpid())), 0); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("data dir lock: %w", err)
	}
	return f, nil
}
