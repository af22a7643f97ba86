package releases

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// LocalFile is a file on this host to publish as an artifact.
type LocalFile struct {
	Path, Name, OS, Arch string
	Kind                 Kind
}

// EnsureLocal publishes version from local files as the platform itself
// (gpuaas dev serving its own build), unless a release of that version
// already exists. It reports whether it published.
func (s *Service) EnsureLocal(ctx context.Context, version string, files []LocalFile) (bool, error) {
	ctx = principal.With(ctx, principal.SystemActor)
	if r, err := s.Store.Read().GetRelease(ctx, version); err == nil && r.Published() {
		return false, nil
	} else if err != nil && !errors.Is(err, storage.ErrNotFound) {
		return false, err
	}
	for _, f := range files {
		fh, err := os.Open(f.Path)
		if err != nil {
			return false, fmt.Errorf("release %s: %w", version, err)
		}
		_, err = s.upload(ctx, UploadInput{Version: version, Name: f.Name, OS: f.OS, Arch: f.Arch, Kind: f.Kind, Body: fh})
		fh.Close()
		if err != nil {
			return false, fmt.Errorf("release %s: upload %s: %w", version, f.Name, err)
		}
	}
	if _, _, err := s.publish(ctx, version); err != nil {
		return false, fmt.Errorf("release %s: %w", version, err)
	}
	return true, nil
}
