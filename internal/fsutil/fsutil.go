// Package fsutil writes small state files (keys, identities, records) so
// that a crash or a power loss leaves either the old content or the new one
// under the name, never an empty or torn file.
package fsutil

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// WriteFile replaces path with data, durably: data goes to a temporary file
// in the same directory, which is synced, closed and renamed over path, and
// then the directory is synced so that the rename itself survives a power
// loss. The file gets mode perm exactly (the umask does not apply). On an
// error path is left as it was and the temporary file is removed.
func WriteFile(path string, data []byte, perm fs.FileMode) error {
	return write(path, data, perm, os.Rename)
}

// CreateFile writes path with data only if path does not exist yet, with the
// same durability as WriteFile: the synced temporary file is hard-linked in,
// and the link fails when path exists. Of two processes creating the same
// file one wins; the other gets an error matching fs.ErrExist and should read
// the winner's file back.
func CreateFile(path string, data []byte, perm fs.FileMode) error {
	return write(path, data, perm, os.Link)
}

// write puts data in a synced temporary file beside path and commits it
// under path with commit (rename or link), then syncs the directory.
func write(path string, data []byte, perm fs.FileMode, commit func(tmp, path string) error) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	// After a rename there is nothing left to remove; after a link, or an
	// error, the temporary name goes.
	defer os.Remove(tmp)
	err = f.Chmod(perm)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := commit(tmp, path); err != nil {
		return err
	}
	return SyncDir(dir)
}

// SyncDir flushes dir's entries (a rename, link or new file in it) to disk.
// File systems that cannot sync a directory are taken at their word.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if errors.Is(err, syscall.EINVAL) || errors.Is(err, errors.ErrUnsupported) {
		return nil
	}
	return err
}
