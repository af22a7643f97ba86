//go:build unix

package gateway

import (
	"errors"
	"io"
	"net"
	"syscall"
)

var errUnsolicited = errors.New("the app sent bytes on an idle connection")

// connCheck says whether an idle connection may carry the next request: the
// app has not closed it, and has sent nothing on it. Bytes waiting on an idle
// connection are an answer to no request (a buggy or hostile app); read as
// the next answer they would reach whoever sent the next request. One
// non-blocking read, the check go-sql-driver/mysql makes before reusing a
// connection; net/http's Transport notices the same from its reader
// goroutine.
func connCheck(c net.Conn) error {
	rc, err := rawConn(c)
	if rc == nil {
		return err
	}
	var checkErr error
	err = rc.Read(func(fd uintptr) bool {
		var buf [1]byte
		n, err := syscall.Read(int(fd), buf[:])
		switch {
		case n == 0 && err == nil:
			checkErr = io.EOF
		case n > 0:
			checkErr = errUnsolicited
		case errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EWOULDBLOCK):
			checkErr = nil
		default:
			checkErr = err
		}
		return true
	})
	if err != nil {
		return err
	}
	return checkErr
}

// waitPeerGone blocks until the peer of c closes or breaks the connection
// (true), sends more (false: it is there), or a read deadline on c passes
// (false). It reads nothing: a byte that arrives stays for whoever reads
// c next, so it can watch a connection a server reads requests from.
func waitPeerGone(c net.Conn) bool { return peek(c, true) == peerGone }

// pending says whether bytes from the peer wait on c to be read; it reads
// none of them, and does not wait.
func pending(c net.Conn) bool { return peek(c, false) == peerSent }

// peerState is what a look at a connection's socket found.
type peerState int

const (
	peerQuiet peerState = iota // nothing (or c has no socket to look at)
	peerSent                   // bytes not yet read
	peerGone                   // closed or broken
)

// peek looks at c's socket without taking anything from it; with wait, it
// waits while there is nothing to see (or until c's read deadline).
func peek(c net.Conn, wait bool) peerState {
	rc, _ := rawConn(c)
	if rc == nil {
		return peerQuiet
	}
	state := peerQuiet
	_ = rc.Read(func(fd uintptr) bool {
		var buf [1]byte
		for {
			n, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			switch {
			case errors.Is(err, syscall.EINTR):
				continue
			case errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EWOULDBLOCK):
				return !wait // with wait, the poller wakes us when there is more
			case err != nil || n == 0:
				state = peerGone
			default:
				state = peerSent
			}
			return true
		}
	})
	return state
}

// canWatch says whether waitPeerGone can watch c.
func canWatch(c net.Conn) bool {
	_, ok := c.(syscall.Conn)
	return ok
}

// rawConn is c's socket, or nil if c has none to look at (a TLS
// connection, a pipe).
func rawConn(c net.Conn) (syscall.RawConn, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil, nil
	}
	return sc.SyscallConn()
}
