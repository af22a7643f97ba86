//go:build !unix

package agent

import "os"

// flock is a no-op where flock(2) does not exist; the agent targets Linux.
func flock(*os.File) error { return nil }
