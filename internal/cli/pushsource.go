package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	docker "github.com/moby/moby/client"
)

// What `artifact push ARG` pushes, first match wins:
//
//  1. ARG is a file: an image tarball (docker save, OCI archive); any other
//     file is refused as "not an image tarball".
//  2. ARG names an image in the local Docker engine: it is exported with the
//     Engine API (ImageSave; the client negotiates down to the engine's API
//     version) and pushed from that export.
//  3. ARG names a registry explicitly (REGISTRY/REPO[:TAG|@DIGEST], where
//     REGISTRY has a dot, a port or is localhost): pulled from there.
//
// Anything else is an error naming what was looked for, so a typo of a file
// name never turns into a pull from Docker Hub.
func loadImage(ctx context.Context, arg, tmpDir string) (v1.Image, error) {
	st, err := os.Stat(arg)
	if err == nil {
		if st.IsDir() {
			return nil, fmt.Errorf("%s is a directory, not an image tarball (docker save -o FILE IMAGE) or image name", arg)
		}
		return imageFromTarball(arg)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	path, found, engineErr := exportFromEngine(ctx, arg, tmpDir)
	if found {
		if engineErr != nil {
			return nil, fmt.Errorf("export %s from the local Docker engine: %w", arg, engineErr)
		}
		return imageFromTarball(path)
	}
	if looksLikeFile(arg) {
		return nil, fmt.Errorf("%s: no such file", arg)
	}
	ref, perr := name.ParseReference(arg)
	if perr == nil && explicitRegistry(arg) {
		return remote.Image(ref, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain))
	}
	why := "the local Docker engine has no image by that name"
	if engineErr != nil {
		why = "the local Docker engine could not be asked (" + engineErr.Error() + ")"
	}
	return nil, fmt.Errorf("%s: no such file, and %s; to pull from a registry, name it in full (REGISTRY/REPOSITORY:TAG)", arg, why)
}

func imageFromTarball(path string) (v1.Image, error) {
	img, err := tarball.ImageFromPath(path, nil)
	if err == nil {
		_, err = img.Manifest() // reads the archive: a non-tarball fails here
	}
	if err != nil {
		return nil, fmt.Errorf("%s is not an image tarball (make one with docker save -o FILE IMAGE): %w", path, err)
	}
	return img, nil
}

// looksLikeFile reports whether arg reads as a path rather than an image name.
func looksLikeFile(arg string) bool {
	if strings.ContainsRune(arg, os.PathSeparator) && (strings.HasPrefix(arg, ".") || strings.HasPrefix(arg, "/") || strings.HasPrefix(arg, "~")) {
		return true
	}
	for _, ext := range []string{".tar", ".tgz", ".tar.gz", ".oci", ".gz"} {
		if strings.HasSuffix(strings.ToLower(arg), ext) {
			return true
		}
	}
	return false
}

// explicitRegistry reports whether ref's first component is a registry
// host (as Docker decides: a dot, a port, or localhost).
func explicitRegistry(ref string) bool {
	first, _, ok := strings.Cut(ref, "/")
	return ok && (strings.ContainsAny(first, ".:") || first == "localhost")
}

// exportFromEngine saves image ref from the local Docker engine into a
// tarball under dir. found is false when the engine has no such image or
// cannot be reached (err says which for the latter).
func exportFromEngine(ctx context.Context, ref, dir string) (path string, found bool, err error) {
	c, err := docker.New(docker.FromEnv)
	if err != nil {
		return "", false, err
	}
	defer c.Close()
	if _, err := c.ImageInspect(ctx, ref); err != nil {
		if cerrdefs.IsNotFound(err) {
			return "", false, nil
		}
		return "", false, err
	}
	rc, err := c.ImageSave(ctx, []string{ref})
	if err != nil {
		return "", true, err
	}
	defer rc.Close()
	path = filepath.Join(dir, "engine-image.tar")
	f, err := os.Create(path)
	if err != nil {
		return "", true, err
	}
	if _, err := io.Copy(f, rc); err != nil {
		_ = f.Close()
		return "", true, err
	}
	return path, true, f.Close()
}
