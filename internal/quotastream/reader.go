// Package quotastream passes a stream on only as far as a quota reserved
// it: a request body whose length nobody declared (a chunked upload)
// reserves ahead of the bytes it receives, so several streams drawing on
// one quota cannot together pass more than it holds, and gives back what
// it reserved and never received when it ends. The quota itself (what is
// counted, the lock that orders the streams) is the caller's: a Reserve
// and a Release function.
package quotastream

import (
	"errors"
	"fmt"
	"io"
)

// Step is how far ahead of the bytes received a stream reserves: one
// reservation (a database transaction under the project's lock) per 8 MiB
// keeps a large upload at a few a second instead of one per read.
const Step = 8 << 20

// Reserve grows a reservation that covers the stream up to covered so that
// it covers at least need, and up to want when the quota has room, and
// returns how far it covers now. An error is a refusal or a failure; the
// stream ends with it either way.
type Reserve func(covered, need, want int64) (int64, error)

// Release gives back unused bytes, reserved past the bytes the stream
// passed on.
type Release func(unused int64) error

// ErrReleased is what a read after Release (or Close) returns: the
// reservation was settled, so no more bytes may pass.
var ErrReleased = errors.New("quotastream: read after the reservation was released")

// Reader hands on each read only once the reservation covers it: a read
// that does not fit is never seen by the consumer.
type Reader struct {
	r       io.Reader
	reserve Reserve
	release Release
	// Positions in the stream counted from its start: where the
	// reservation covered it at first (bytes that pass without reserving),
	// the bytes passed on, and how far the reservation covers it now.
	start, passed, covered int64
	err                    error // the reservation that failed; the stream ends with it
	released               bool
	releaseErr             error
}

// New passes r on under reserve, the first covered bytes without
// reserving; release (nil: nothing to give back) runs once, at Release
// or Close.
func New(r io.Reader, covered int64, reserve Reserve, release Release) *Reader {
	return &Reader{r: r, reserve: reserve, release: release, start: covered, covered: covered}
}

func (q *Reader) Read(p []byte) (int, error) {
	if q.released {
		return 0, ErrReleased
	}
	if q.err != nil {
		return 0, q.err
	}
	n, err := q.r.Read(p)
	if need := q.passed + int64(n); n > 0 && need > q.covered {
		got, rerr := q.reserve(q.covered, need, need+Step)
		if rerr == nil && got < need {
			rerr = fmt.Errorf("quotastream: reserved up to %d of the %d bytes needed", got, need)
		}
		if rerr != nil {
			q.err = rerr
			return 0, rerr
		}
		q.covered = got
	}
	q.passed += int64(n)
	return n, err
}

// Err is the reservation that ended the stream, or nil.
func (q *Reader) Err() error { return q.err }

// Passed is how many bytes the stream handed on.
func (q *Reader) Passed() int64 { return q.passed }

// Unused is what this reader reserved past the bytes it passed on.
func (q *Reader) Unused() int64 { return q.covered - max(q.passed, q.start) }

// Release gives back what the reservation holds past the bytes passed on,
// once (a later call returns the first one's error); reads after it fail.
// Its owner calls it when the stream's consumer is done with it.
func (q *Reader) Release() error {
	if q.released {
		return q.releaseErr
	}
	q.released = true
	if unused := q.Unused(); unused > 0 && q.release != nil {
		q.releaseErr = q.release(unused)
	}
	return q.releaseErr
}

// Close releases the reservation's unused part and closes the stream when
// it is a Closer: a consumer that closes early settles the stream early.
func (q *Reader) Close() error {
	err := q.Release()
	if c, ok := q.r.(io.Closer); ok {
		if cerr := c.Close(); err == nil {
			err = cerr
		}
	}
	return err
}
