package agent

import (
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/gpuaas/gpuaas/internal/fsutil"
)

// holdsFile, under the data dir, lists the images the agent holds for runs
// that have not created their containers yet.
const holdsFile = "held-images.json"

// DefaultImageHoldMax bounds how long an image pulled for a run stays held
// when the run never comes: far past any control-plane outage between a
// version's image.pull and its container.run, short enough that a version
// abandoned between the two does not keep its image on the host for good.
const DefaultImageHoldMax = 24 * time.Hour

// imageHold is one image reference held for a run of one instance:
// Workload names the container or Compose project of the run that took it,
// and is empty for an image.pull's hold, which waits for whichever run of
// the instance comes next.
type imageHold struct {
	Ref        string    `json:"ref"`
	InstanceID string    `json:"instance_id,omitempty"`
	Workload   string    `json:"workload,omitempty"`
	Since      time.Time `json:"since"`
}

// holds keeps the images pulled for a run out of the pruner's reach until
// the run ended (a run that created its container leaves the image in use,
// which the engine refuses to remove, stopped or not; a failed one will
// not use it), its workload or the instance is removed, or max passed.
// The prune grace alone counts from the pull, and the run may come much
// later: the control plane down between the two tasks, a slow host, a long
// queue. Holds are written durably (fsutil), since a restarted agent
// prunes by the same rules and the run interrupted by the restart comes
// again.
//
// The pruner removes through RemoveUnheld, which looks at the holds and
// removes under mu; Hold takes mu too. So a hold is either taken before
// the pruner's last look, which then sees it, or after the removal
// finished, and every taker looks for the image only once its hold is
// taken (image.pull and the driver's Run and Up pull when it is missing):
// no order of the two leaves a held image removed.
type holds struct {
	path string
	max  time.Duration
	now  func() time.Time
	log  *slog.Logger

	mu     sync.Mutex
	loaded bool
	list   []imageHold
}

// loadLocked reads the record once. A missing record holds nothing; an
// unreadable one is replaced (the images it held become prunable after the
// grace, which the warning says).
func (h *holds) loadLocked() {
	if h.loaded {
		return
	}
	h.loaded = true
	b, err := os.ReadFile(h.path)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			h.log.Warn("could not read the record of images held for runs; they are pruned after the grace", "path", h.path, "err", err)
		}
		return
	}
	if err := json.Unmarshal(b, &h.list); err != nil {
		h.list = nil
		h.log.Warn("the record of images held for runs is not a JSON list; starting a new one (the images it held are pruned after the grace)", "path", h.path, "err", err)
	}
}

func (h *holds) saveLocked() {
	b, _ := json.Marshal(h.list)
	if err := fsutil.WriteFile(h.path, b, 0o600); err != nil {
		// The hold still works in this process; only a restart forgets it.
		h.log.Warn("could not save the record of images held for runs", "path", h.path, "err", err)
	}
}

// Hold holds refs for the run of workload of instanceID (an empty
// workload: for the instance's next run), from now (a hold already there
// starts again).
func (h *holds) Hold(instanceID, workload string, refs ...string) {
	if h == nil { // an agent built without a data dir (tests) holds nothing
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.loadLocked()
	now := h.now()
	for _, ref := range refs {
		i := slices.IndexFunc(h.list, func(x imageHold) bool {
			return x.Ref == ref && x.InstanceID == instanceID && x.Workload == workload
		})
		if i < 0 {
			h.list = append(h.list, imageHold{Ref: ref, InstanceID: instanceID, Workload: workload, Since: now})
		} else {
			h.list[i].Since = now
		}
	}
	h.saveLocked()
}

// Release drops every hold of instanceID: it is removed, no run of it is
// coming.
func (h *holds) Release(instanceID string) {
	h.release(func(x imageHold) bool { return x.InstanceID == instanceID })
}

// ReleaseWorkload drops the holds the runs of workload took: it is torn
// down, and a run of it that was interrupted will not come back to use
// them. A pull's hold, waiting for the instance's next run, stays.
func (h *holds) ReleaseWorkload(instanceID, workload string) {
	h.release(func(x imageHold) bool { return x.InstanceID == instanceID && x.Workload == workload })
}

// EndRun drops the holds on refs that the run of workload ended: its own
// and the pulls' made for it. Whether it created its containers (which
// then keep the images in use) or failed (an upgrade reverts to the image
// it ran before, which its container keeps), nothing is waiting for them
// any more; a later run takes its own.
func (h *holds) EndRun(instanceID, workload string, refs ...string) {
	h.release(func(x imageHold) bool {
		return x.InstanceID == instanceID && (x.Workload == workload || x.Workload == "") && slices.Contains(refs, x.Ref)
	})
}

// releasePull drops the hold an image.pull of instanceID took on ref.
func (h *holds) releasePull(instanceID, ref string) {
	h.release(func(x imageHold) bool { return x.InstanceID == instanceID && x.Workload == "" && x.Ref == ref })
}

func (h *holds) release(drop func(imageHold) bool) {
	if h == nil { // an agent built without a data dir (tests) holds nothing
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.loadLocked()
	n := len(h.list)
	h.list = slices.DeleteFunc(h.list, drop)
	if len(h.list) != n {
		h.saveLocked()
	}
}

// Held reports whether a run still holds ref; the driver's pruner asks.
func (h *holds) Held(ref string) bool {
	if h == nil { // an agent built without a data dir (tests) holds nothing
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.heldLocked(ref)
}

func (h *holds) heldLocked(ref string) bool {
	h.loadLocked()
	now := h.now()
	return slices.ContainsFunc(h.list, func(x imageHold) bool { return x.Ref == ref && now.Sub(x.Since) < h.max })
}

// RemoveUnheld calls remove unless ref is held (held is then true), and
// no hold can be taken until remove returned (see holds): the pruner's
// removal.
func (h *holds) RemoveUnheld(ref string, remove func() error) (held bool, err error) {
	if h == nil { // an agent built without a data dir (tests) holds nothing
		return false, remove()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.heldLocked(ref) {
		return true, nil
	}
	return false, remove()
}

// Expire drops the holds older than max and returns them.
func (h *holds) Expire() []imageHold {
	if h == nil { // an agent built without a data dir (tests) holds nothing
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.loadLocked()
	now := h.now()
	var gone []imageHold
	h.list = slices.DeleteFunc(h.list, func(x imageHold) bool {
		if now.Sub(x.Since) >= h.max {
			gone = append(gone, x)
			return true
		}
		return false
	})
	if len(gone) > 0 {
		h.saveLocked()
	}
	return gone
}
