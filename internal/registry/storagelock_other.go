//go:build !unix

package registry

import (
	"errors"
	"os"
)

var errWouldBlock = errors.New("would block")

// flock has no flock(2) to ask here: a server runs unlocked, and garbage
// collection, which would then be unsafe, refuses.
func flock(_ *os.File, exclusive bool) error {
	if exclusive {
		return errors.New("registry garbage collection needs flock(2), which this platform lacks")
	}
	return nil
}

// ownLikeDir has no owners to match here.
func ownLikeDir(*os.File, string) error { return nil }
