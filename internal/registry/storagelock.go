package registry

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// The embedded registry's storage is shared by every replica, and offline
// garbage collection may only run while none of them uses it: a push
// between its mark and its sweep would have its new blobs removed. Each
// server holds a shared flock(2) on lockFileName in the storage directory
// for as long as its registry is open; gc takes it exclusive. Both ask
// without waiting, so neither side blocks on the other: each refuses and
// says why.
const lockFileName = ".gpuaas-registry.lock"

// ErrStorageLocked matches the refusals of New (gc holds the storage) and
// of CollectGarbage (a server uses it).
var ErrStorageLocked = errors.New("registry storage is locked")

// lockedError is a refusal whose message is the whole story for a person.
type lockedError struct{ msg string }

func (e lockedError) Error() string        { return e.msg }
func (e lockedError) Is(target error) bool { return target == ErrStorageLocked }

// storageLock is one hold of the storage lock file.
type storageLock struct{ f *os.File }

func (l *storageLock) release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close() // closing the descriptor drops the flock
	l.f = nil
	return err
}

// lockStorage takes the lock on root (which must exist), shared or
// exclusive, failing at once with busy's message when the other kind is
// held.
func lockStorage(root string, exclusive bool, busy string) (*storageLock, error) {
	// Read-only: flock needs no write access. Owner-only, as everything
	// under the data directory; ownLikeDir keeps a gc run as root from
	// locking the servers out of it.
	f, err := os.OpenFile(filepath.Join(root, lockFileName), os.O_RDONLY|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("registry storage lock: %w", err)
	}
	if err := ownLikeDir(f, root); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("registry storage lock: %w", err)
	}
	if err := flock(f, exclusive); err != nil {
		_ = f.Close()
		if errors.Is(err, errWouldBlock) {
			return nil, lockedError{busy}
		}
		return nil, fmt.Errorf("lock %s: %w (on NFS, flock works only where the mount supports it)", f.Name(), err)
	}
	return &storageLock{f: f}, nil
}

// gcRunningMessage is a server's refusal while gc holds root.
func gcRunningMessage(root string) string {
	return fmt.Sprintf("the registry storage %s is being garbage-collected (gpuaas registry gc); start the server again once it has finished", root)
}

// HoldStorage takes a server's shared hold on the embedded registry's
// storage at root, as New does, so that a server refuses to start while
// `gpuaas registry gc` runs before it has opened and migrated its
// database, rather than halfway up. A root that does not exist yet holds
// nothing to collect: the release is then a no-op. The caller releases the
// hold when it closes (New takes a hold of its own).
func HoldStorage(root string) (release func() error, err error) {
	if _, err := os.Stat(root); errors.Is(err, os.ErrNotExist) {
		return func() error { return nil }, nil
	}
	l, err := lockStorage(root, false, gcRunningMessage(root))
	if err != nil {
		return nil, err
	}
	return l.release, nil
}
