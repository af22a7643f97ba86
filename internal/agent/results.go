package agent

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/gpuaas/gpuaas/client/nodeapi"
)

// results persists the result of every finished task under the data dir so
// a re-delivered task (delivery is at least once) re-reports its stored
// result instead of acting twice, across agent restarts too.
type results struct{ dir string }

var safeID = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)

func (r results) path(taskID string) (string, bool) {
	if !safeID.MatchString(taskID) || taskID == "." || taskID == ".." {
		return "", false
	}
	return filepath.Join(r.dir, taskID+".json"), true
}

func (r results) Get(taskID string) (nodeapi.TaskResult, bool) {
	var res nodeapi.TaskResult
	p, ok := r.path(taskID)
	if !ok {
		return res, false
	}
	b, err := os.ReadFile(p)
	if err != nil || json.Unmarshal(b, &res) != nil {
		return res, false
	}
	return res, true
}

func (r results) Has(taskID string) bool {
	p, ok := r.path(taskID)
	if !ok {
		return false
	}
	_, err := os.Stat(p)
	return err == nil
}

func (r results) Put(taskID string, res nodeapi.TaskResult) error {
	p, ok := r.path(taskID)
	if !ok {
		return errors.New("task id is not storable")
	}
	b, err := json.Marshal(res)
	if err != nil {
		return err
	}
	return writeFileAtomic(p, b)
}

// Remove forgets a task's record.
func (r results) Remove(taskID string) error {
	p, ok := r.path(taskID)
	if !ok {
		return nil
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// Prune removes the records older than maxAge and all but the newest keep,
// except those of the tasks in live (their workloads still run: a task
// with no record would make them orphans). It returns how many it removed.
func (r results) Prune(now time.Time, keep int, maxAge time.Duration, live map[string]bool) (int, error) {
	entries, err := os.ReadDir(r.dir)
	if err != nil {
		return 0, err
	}
	type rec struct {
		id  string
		mod time.Time
	}
	var recs []rec
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || e.IsDir() {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		recs = append(recs, rec{id, info.ModTime()})
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].mod.After(recs[j].mod) })
	removed := 0
	for i, rc := range recs {
		if live[rc.id] || (i < keep && now.Sub(rc.mod) <= maxAge) {
			continue
		}
		if err := os.Remove(filepath.Join(r.dir, rc.id+".json")); err != nil && !errors.Is(err, os.ErrNotExist) {
			return removed, err
		}
		removed++
	}
	return removed, nil
}
