//go:build unix

package registry

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// gc run as root on a storage directory the servers' user owns leaves the
// lock file to that user: otherwise the owner-only file it created would
// keep every server from opening its registry afterwards.
func TestStorageLockFileBelongsToTheDirectorysOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CI runs as root): it checks what gc run as root leaves behind")
	}
	root := t.TempDir()
	const uid, gid = 4242, 4343
	if err := os.Chown(root, uid, gid); err != nil {
		t.Fatal(err)
	}
	for _, exclusive := range []bool{true, false} { // gc, then a server
		l, err := lockStorage(root, exclusive, "busy")
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(filepath.Join(root, lockFileName))
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid != uid || st.Gid != gid || fi.Mode().Perm() != 0o600 {
			t.Fatalf("exclusive=%v: lock file %d:%d %v, want %d:%d -rw-------", exclusive, st.Uid, st.Gid, fi.Mode().Perm(), uid, gid)
		}
		if err := l.release(); err != nil {
			t.Fatal(err)
		}
	}

	// A directory root owns keeps a file root owns.
	own := t.TempDir()
	l, err := lockStorage(own, true, "busy")
	if err != nil {
		t.Fatal(err)
	}
	defer l.release()
	fi, err := os.Stat(filepath.Join(own, lockFileName))
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 0 {
		t.Fatalf("lock file in root's directory owned by %d", st.Uid)
	}
}
