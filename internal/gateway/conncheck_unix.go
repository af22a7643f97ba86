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
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
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
