package agent

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"

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
