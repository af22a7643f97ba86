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

// imageHold is one image reference held for the runs of one instance.
type imageHold struct {
	Ref        string    `json:"ref"`
	InstanceID string    `json:"instance_id,omitempty"`
	Since      time.Time `json:"since"`
}

// holds keeps the images pulled for a run out of the pruner's reach until
// the run created its container (from then on the engine refuses to remove
// an image a container uses, stopped or not), the instance is removed, or
// max passed. The prune grace alone counts from the pull, and the run may
// come much later: the control plane down between the two tasks, a slow
// host, a long queue. Holds are written durably (fsutil), since a restarted
// agent prunes by the same rules and the run may still come.
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

// Hold holds refs for a run of instanceID, from now (a hold already there
// starts again).
func (h *holds) Hold(instanceID string, refs ...string) {
	if h == nil { // an agent built without a data dir (tests) holds nothing
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.loadLocked()
	now := h.now()
	for _, ref := range refs {
		i := slices.IndexFunc(h.list, func(x imageHold) bool { return x.Ref == ref && x.InstanceID == instanceID })
		if i < 0 {
			h.list = append(h.list, imageHold{Ref: ref, InstanceID: instanceID, Since: now})
		} else {
			h.list[i].Since = now
		}
	}
	h.saveLocked()
}

// Release drops the holds of instanceID on refs (every ref when none is
// named).
func (h *holds) Release(instanceID string, refs ...string) {
	if h == nil { // an agent built without a data dir (tests) holds nothing
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.loadLocked()
	n := len(h.list)
	h.list = slices.DeleteFunc(h.list, func(x imageHold) bool {
		return x.InstanceID == instanceID && (len(refs) == 0 || slices.Contains(refs, x.Ref))
	})
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
	h.loadLocked()
	now := h.now()
	return slices.ContainsFunc(h.list, func(x imageHold) bool { return x.Ref == ref && now.Sub(x.Since) < h.max })
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
