package registry

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"strings"

	"github.com/distribution/distribution/v3/registry/storage"
	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/google/uuid"
)

// GCResult is what CollectGarbage removed, or, in a dry run, would remove.
type GCResult struct {
	DryRun bool `json:"dry_run"`
	// Blobs and Bytes: the blobs no manifest references (images' layers
	// and configs, deleted manifests themselves) and their stored size.
	Blobs int   `json:"blobs"`
	Bytes int64 `json:"bytes"`
	// LayerLinks are the repositories' links to those blobs (small files).
	LayerLinks int `json:"layer_links"`
}

// CollectGarbage removes the blobs of the embedded registry's storage under
// root that no manifest references, with distribution's own mark and sweep.
// Every manifest of every repository is marked, tagged or not: the platform
// deletes manifests by digest and keeps untagged ones (a signature is a tag
// of its own manifest, sha256-….sig, not of the image's), so only what a
// delete left behind is swept.
//
// It holds root's storage lock exclusively throughout and refuses when any
// server holds it: a push between the mark and the sweep would lose blobs.
// logger receives distribution's log lines (each removal, at debug).
func CollectGarbage(ctx context.Context, root string, dryRun bool, logger *slog.Logger) (GCResult, error) {
	res := GCResult{DryRun: dryRun}
	if st, err := os.Stat(root); err != nil || !st.IsDir() {
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			return res, fmt.Errorf("%s is not a registry directory: pass the server's --registry-dir (or --data-dir)", root)
		}
		return res, err
	}
	lock, err := lockStorage(root, true, fmt.Sprintf("a gpuaas server is using %s; stop every replica, then run it again", root))
	if err != nil {
		return res, err
	}
	defer lock.release()

	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	id := uuid.NewString()
	defer registerLogger(id, logger.With("component", "registry-gc"))()
	ctx = context.WithValue(ctx, instanceKey, id)

	driver, ns, err := openStorage(ctx, root)
	if err != nil {
		return res, err
	}
	// Distribution's mark fails where no repository was ever pushed to,
	// and its sweep where no blob was ever committed (an upload begun and
	// abandoned makes the repository, not the blobs): in both, nothing to
	// collect.
	for _, dir := range []string{repositoriesRoot, blobsRoot} {
		if _, err := driver.Stat(ctx, strings.TrimSuffix(dir, "/")); errors.As(err, new(storagedriver.PathNotFoundError)) {
			return res, nil
		} else if err != nil {
			return res, err
		}
	}
	// MarkAndSweep's own dry run only prints what it would remove, on
	// stdout: it runs for real on a driver that measures each removal and,
	// in a dry run, skips it.
	counting := &sweepCounter{StorageDriver: driver, dryRun: dryRun, res: &res}
	if err := storage.MarkAndSweep(ctx, counting, ns, storage.GCOpts{Quiet: true}); err != nil {
		return res, fmt.Errorf("registry garbage collection: %w", err)
	}
	return res, nil
}

// Distribution's on-disk layout (its path specs "repositories" and
// "blobs"): blobsRoot keeps every blob's data,
// <blobsRoot>/<algorithm>/<2 hex>/<hex>/data; everything else the sweep
// removes is a repository's link to a blob.
const (
	repositoriesRoot = "/docker/registry/v2/repositories"
	blobsRoot        = "/docker/registry/v2/blobs/"
)

// sweepCounter is the storage driver the sweep deletes through.
type sweepCounter struct {
	storagedriver.StorageDriver
	dryRun bool
	res    *GCResult
}

func (d *sweepCounter) Delete(ctx context.Context, p string) error {
	blob := strings.HasPrefix(p, blobsRoot)
	var size int64
	if blob {
		fi, err := d.Stat(ctx, path.Join(p, "data"))
		switch {
		case err == nil:
			size = fi.Size()
		case !errors.As(err, new(storagedriver.PathNotFoundError)):
			return err
		}
	}
	if !d.dryRun {
		if err := d.StorageDriver.Delete(ctx, p); err != nil {
			return err
		}
	}
	if blob {
		d.res.Blobs++
		d.res.Bytes += size
	} else {
		d.res.LayerLinks++
	}
	return nil
}

// A dry run writes nothing; the sweep writes nothing else in any case.
var errDryRun = errors.New("registry gc: a dry run writes nothing")

func (d *sweepCounter) PutContent(ctx context.Context, p string, content []byte) error {
	if d.dryRun {
		return errDryRun
	}
	return d.StorageDriver.PutContent(ctx, p, content)
}

func (d *sweepCounter) Writer(ctx context.Context, p string, appendMode bool) (storagedriver.FileWriter, error) {
	if d.dryRun {
		return nil, errDryRun
	}
	return d.StorageDriver.Writer(ctx, p, appendMode)
}

func (d *sweepCounter) Move(ctx context.Context, from, to string) error {
	if d.dryRun {
		return errDryRun
	}
	return d.StorageDriver.Move(ctx, from, to)
}
