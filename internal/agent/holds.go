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

	"github.com/gpuaas/gpuaas/client/nodeapi"
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

// imageHold is one hold on an image reference, taken by one task of an
// instance: an image.pull (Kind), whose hold waits for a run of the
// instance to use the image, or the container.run or compose.up whose run
// it is (Workload names that run's container or Compose project). An image
// is held while any hold on it lives, and each hold ends by its own
// holder's rule (see holds), never because another holder's ended: every
// holder counts once towards the image's holds.
type imageHold struct {
	Ref        string    `json:"ref"`
	InstanceID string    `json:"instance_id,omitempty"`
	Task       string    `json:"task,omitempty"`
	Kind       string    `json:"kind,omitempty"`
	Workload   string    `json:"workload,omitempty"`
	Since      time.Time `json:"since"`
}

// pull reports whether an image.pull took the hold. A record written before
// holds named their task reads as a pull's when it names no workload, as
// it meant then.
func (x imageHold) pull() bool {
	if x.Kind != "" {
		return x.Kind == nodeapi.KindImagePull
	}
	return x.Workload == ""
}

// holder is the task that takes holds: its id and kind, its instance, and
// for a run the workload (container or Compose project) it starts.
type holder struct {
	InstanceID, Task, Kind, Workload string
}

// holderOf is task t as a holder; workload names its run's container or
// Compose project.
func holderOf(t nodeapi.Task, workload string) holder {
	return holder{InstanceID: t.InstanceID, Task: t.ID, Kind: t.Kind, Workload: workload}
}

// owns reports whether by took x. A hold from a record written before
// holds named their task is a run's hold of its workload, or a pull's that
// no task owns (it ends when a run uses its image, the instance goes, or
// the longest hold passes).
func (by holder) owns(x imageHold) bool {
	if x.InstanceID != by.InstanceID {
		return false
	}
	if x.Task != "" {
		return x.Task == by.Task
	}
	return !x.pull() && by.Kind != nodeapi.KindImagePull && x.Workload == by.Workload
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
// Each task's holds are its own, and end by its kind's rule:
//   - a run's (container.run, compose.up) end when it ends (EndRun), when
//     another run of its workload ends, created or failed (EndRun of that
//     run), when its workload is torn down (ReleaseWorkload), or with the
//     instance;
//   - an image.pull's end when the pull fails (Drop), when a run of the
//     instance created its containers from the image (EndRun of a run that
//     succeeded), or with the instance. A run that fails leaves them: the
//     pull was made for whichever run of the instance comes next, and a
//     retry may; nor does one pull's failure end another's hold.
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

// Hold holds refs for by, from now (a hold of by's already there starts
// again).
func (h *holds) Hold(by holder, refs ...string) {
	if h == nil { // an agent built without a data dir (tests) holds nothing
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.loadLocked()
	now := h.now()
	for _, ref := range refs {
		i := slices.IndexFunc(h.list, func(x imageHold) bool {
			return x.Ref == ref && x.InstanceID == by.InstanceID && x.Task == by.Task
		})
		if i < 0 {
			h.list = append(h.list, imageHold{Ref: ref, InstanceID: by.InstanceID, Task: by.Task, Kind: by.Kind, Workload: by.Workload, Since: now})
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
	h.release(func(x imageHold) bool { return x.InstanceID == instanceID && !x.pull() && x.Workload == workload })
}

// Drop drops the holds by took, and no other: a failed image.pull's.
func (h *holds) Drop(by holder) {
	h.release(by.owns)
}

// EndRun drops the holds of the run by, which ended. A run that created
// its containers (created) also ends the pulls' holds of its instance on
// refs, the images those containers now keep in use (the engine refuses to
// remove them): the run they waited for came. A run that failed leaves the
// pulls' holds for the next run of the instance; its own are not needed
// any more (an upgrade whose run failed reverts to the image the instance
// ran before, which its container keeps).
//
// Either way it ends the holds of other runs of its workload. A run of it
// cut short earlier (the agent stopped) kept its hold for its task's
// return, but the control plane gives a workload a run under another task
// id only once it is done with the earlier one (one operation of an
// instance at a time, each waiting for its tasks' outcomes): a retried or
// reverting step, or a later operation. So that run is not coming back,
// whether this one created the workload or failed, and its hold would
// otherwise last until teardown or the longest hold. Nothing the workload
// runs loses its image by it: a container that run created keeps its image
// in use, and the engine refuses to remove that.
func (h *holds) EndRun(by holder, created bool, refs ...string) {
	h.release(func(x imageHold) bool {
		if by.owns(x) {
			return true
		}
		if x.InstanceID != by.InstanceID {
			return false
		}
		if x.pull() {
			return created && slices.Contains(refs, x.Ref)
		}
		return by.Workload != "" && x.Workload == by.Workload
	})
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
