package docker

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/gpuaas/gpuaas/internal/fsutil"
	"github.com/moby/moby/client"
)

// pulledFile, under the driver's DataDir, lists the images the driver
// pulled (repo@digest references), so that the agent prunes only what it
// brought onto the host, across restarts too.
const pulledFile = "pulled-images.json"

// pulled is the set of references the driver pulled, loaded from DataDir
// on first use.
type pulled struct {
	mu      sync.Mutex
	loaded  bool
	refs    map[string]bool
	used    map[string]time.Time // when Pull last handed the reference out (this process)
	pulling map[string]int       // pulls in progress (this process): the pruner leaves them be
}

func (d *Driver) pulledPath() string {
	if d.cfg.DataDir == "" {
		return ""
	}
	return filepath.Join(d.cfg.DataDir, pulledFile)
}

// loadPulledLocked reads the record once; a missing or unreadable record
// is empty (the agent then prunes nothing it cannot name).
func (d *Driver) loadPulledLocked() {
	if d.pulled.loaded {
		return
	}
	d.pulled.loaded, d.pulled.refs = true, map[string]bool{}
	p := d.pulledPath()
	if p == "" {
		return
	}
	b, err := os.ReadFile(p)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			d.cfg.Logger.Warn("could not read the record of pulled images", "path", p, "err", err)
		}
		return
	}
	var refs []string
	if err := json.Unmarshal(b, &refs); err != nil {
		d.cfg.Logger.Warn("the record of pulled images is not a JSON list; starting a new one", "path", p, "err", err)
		return
	}
	for _, r := range refs {
		d.pulled.refs[r] = true
	}
}

// savePulledLocked writes the record atomically and durably: a crash or a
// power loss leaves the old record or the new one, never an empty or torn
// file (which would make the agent forget every image it pulled).
func (d *Driver) savePulledLocked() {
	p := d.pulledPath()
	if p == "" {
		return
	}
	refs := make([]string, 0, len(d.pulled.refs))
	for r := range d.pulled.refs {
		refs = append(refs, r)
	}
	slices.Sort(refs)
	b, _ := json.Marshal(refs)
	err := os.MkdirAll(filepath.Dir(p), 0o700)
	if err == nil {
		err = fsutil.WriteFile(p, b, 0o600)
	}
	if err != nil {
		d.cfg.Logger.Warn("could not save the record of pulled images", "path", p, "err", err)
	}
}

// beginPull records ref before the engine pulls it, and stamps its use. An
// agent killed once the engine holds the image but before the pull task
// finished finds ref in the record on its next start, so the image is
// pruned like any other it pulled; a pull that never completes leaves a
// reference the engine does not hold, which the pruner forgets. Until
// endPull the pruner leaves ref alone: an image is never removed, nor its
// reference forgotten, mid-pull.
func (d *Driver) beginPull(ref string, now time.Time) {
	d.pulled.mu.Lock()
	defer d.pulled.mu.Unlock()
	d.loadPulledLocked()
	if d.pulled.used == nil {
		d.pulled.used = map[string]time.Time{}
	}
	if d.pulled.pulling == nil {
		d.pulled.pulling = map[string]int{}
	}
	d.pulled.used[ref] = now
	d.pulled.pulling[ref]++
	if !d.pulled.refs[ref] {
		d.pulled.refs[ref] = true
		d.savePulledLocked()
	}
}

// endPull ends what beginPull started.
func (d *Driver) endPull(ref string) {
	d.pulled.mu.Lock()
	defer d.pulled.mu.Unlock()
	if d.pulled.pulling[ref]--; d.pulled.pulling[ref] <= 0 {
		delete(d.pulled.pulling, ref)
	}
}

// pullInProgress reports whether this process is pulling ref.
func (d *Driver) pullInProgress(ref string) bool {
	d.pulled.mu.Lock()
	defer d.pulled.mu.Unlock()
	return d.pulled.pulling[ref] > 0
}

// markPulled records that Pull handed ref out, at now: fresh when the
// driver pulled it (it joins the record), or found on the engine (it is
// pruned only if the driver pulled it before). The pruner's grace counts
// from the last time, so an image is not removed between a pull and the
// container it is for.
func (d *Driver) markPulled(ref string, fresh bool, now time.Time) {
	d.pulled.mu.Lock()
	defer d.pulled.mu.Unlock()
	d.loadPulledLocked()
	if d.pulled.used == nil {
		d.pulled.used = map[string]time.Time{}
	}
	d.pulled.used[ref] = now
	if fresh && !d.pulled.refs[ref] {
		d.pulled.refs[ref] = true
		d.savePulledLocked()
	}
}

// lastUsed is when Pull last handed ref out (zero if not in this process).
func (d *Driver) lastUsed(ref string) time.Time {
	d.pulled.mu.Lock()
	defer d.pulled.mu.Unlock()
	return d.pulled.used[ref]
}

// forgetPulled drops ref from the record, unless a pull of ref began
// meanwhile (it recorded ref again, and must keep it).
func (d *Driver) forgetPulled(ref string) {
	d.pulled.mu.Lock()
	defer d.pulled.mu.Unlock()
	d.loadPulledLocked()
	if d.pulled.refs[ref] && d.pulled.pulling[ref] == 0 {
		delete(d.pulled.refs, ref)
		d.savePulledLocked()
	}
}

// PulledImages lists the references the driver pulled and has not pruned.
func (d *Driver) PulledImages() []string {
	d.pulled.mu.Lock()
	defer d.pulled.mu.Unlock()
	d.loadPulledLocked()
	refs := make([]string, 0, len(d.pulled.refs))
	for r := range d.pulled.refs {
		refs = append(refs, r)
	}
	slices.Sort(refs)
	return refs
}

// ImagePruner removes the images the driver pulled once no container on the
// engine (of any owner, running or stopped) has used them for Grace: the
// images of decommissioned instances go, an image any container still uses
// stays, and an image the agent did not pull is never touched. The grace
// also covers the moment between a pull and the container it is for; an
// image Held reports held for a run (pulled for a container not created
// yet) stays whatever its idle time, and its grace starts once released.
// A run may take its hold after the pruner looked at Held: the removal goes
// through RemoveUnheld, which looks again with hold-taking shut out until
// the image is gone.
type ImagePruner struct {
	D     *Driver
	Grace time.Duration
	Now   func() time.Time
	Held  func(ref string) bool // nil: nothing is held
	// RemoveUnheld calls remove unless ref is held (nil: remove is called).
	RemoveUnheld func(ref string, remove func() error) (held bool, err error)

	mu        sync.Mutex
	idleSince map[string]time.Time
}

// Run makes one pass and returns the references it removed.
func (p *ImagePruner) Run(ctx context.Context) ([]string, error) {
	now := time.Now
	if p.Now != nil {
		now = p.Now
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.idleSince == nil {
		p.idleSince = map[string]time.Time{}
	}
	refs := p.D.PulledImages()
	if len(refs) == 0 {
		return nil, nil
	}
	res, err := p.D.C.ContainerList(ctx, client.ContainerListOptions{All: true})
	if err != nil {
		return nil, err
	}
	inUse := map[string]bool{}
	for _, c := range res.Items {
		inUse[c.ImageID] = true
	}
	var removed []string
	for _, ref := range refs {
		if p.D.pullInProgress(ref) { // recorded before its pull: not ours to judge yet
			delete(p.idleSince, ref)
			continue
		}
		img, err := p.D.C.ImageInspect(ctx, ref)
		if cerrdefs.IsNotFound(err) { // removed by someone else
			p.D.forgetPulled(ref)
			delete(p.idleSince, ref)
			continue
		}
		if err != nil {
			return removed, err
		}
		if inUse[img.ID] || p.Held != nil && p.Held(ref) {
			delete(p.idleSince, ref)
			continue
		}
		first, ok := p.idleSince[ref]
		if !ok {
			first = now()
			p.idleSince[ref] = first
		}
		if u := p.D.lastUsed(ref); u.After(first) {
			first = u
		}
		if now().Sub(first) < p.Grace {
			continue
		}
		held, err := p.removeUnheld(ref, func() error {
			// Not forced: the engine refuses while a container uses the image.
			if _, err := p.D.C.ImageRemove(ctx, ref, client.ImageRemoveOptions{PruneChildren: true}); err != nil && !cerrdefs.IsNotFound(err) {
				return err
			}
			// Still shut out: a run that holds ref next records its pull
			// of it after this.
			p.D.forgetPulled(ref)
			return nil
		})
		if held { // a run took its hold since the look above
			delete(p.idleSince, ref)
			continue
		}
		if err != nil {
			p.D.cfg.Logger.WarnContext(ctx, "could not remove an unused pulled image", "image", ref, "err", err)
			continue
		}
		p.D.cfg.Logger.InfoContext(ctx, "removed an image no container has used for the grace period", "image", ref, "grace", p.Grace.String())
		delete(p.idleSince, ref)
		removed = append(removed, ref)
	}
	return removed, nil
}

func (p *ImagePruner) removeUnheld(ref string, remove func() error) (bool, error) {
	if p.RemoveUnheld == nil {
		return false, remove()
	}
	return p.RemoveUnheld(ref, remove)
}
