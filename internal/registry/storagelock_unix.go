//go:build unix

package registry

import (
	"os"
	"syscall"
)

var errWouldBlock error = syscall.EWOULDBLOCK

func flock(f *os.File, exclusive bool) error {
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	return syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
}

// ownLikeDir gives the lock file to the owner of the storage directory
// when root created it (or an earlier gc run as root did): `gpuaas registry
// gc` run as root would otherwise leave an owner-only file that the
// servers, running as the directory's owner, cannot open.
func ownLikeDir(f *os.File, dir string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	d, err := os.Stat(dir)
	if err != nil {
		return err
	}
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	ds, ok1 := d.Sys().(*syscall.Stat_t)
	fs, ok2 := fi.Sys().(*syscall.Stat_t)
	if !ok1 || !ok2 || fs.Uid != 0 || ds.Uid == 0 {
		return nil
	}
	return f.Chown(int(ds.Uid), int(ds.Gid))
}
