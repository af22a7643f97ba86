//go:build !unix

package server

import "os"

// flock is a no-op where flock(2) does not exist; dev mode targets unix.
func flock(*os.File) error { return nil }
