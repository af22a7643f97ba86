package quotastream

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"testing"
)

var errRefused = errors.New("over the quota")

// quota is a fake reservation: it grants up to want within room and
// refuses a need past it; fail, once set, fails every reservation.
type quota struct {
	room     int64
	fail     error
	reserves [][3]int64 // covered, need, want of each call
	released []int64
}

func (q *quota) reserve(covered, need, want int64) (int64, error) {
	q.reserves = append(q.reserves, [3]int64{covered, need, want})
	if q.fail != nil {
		return 0, q.fail
	}
	if need > q.room {
		return 0, errRefused
	}
	return min(want, q.room), nil
}

func (q *quota) release(unused int64) error {
	q.released = append(q.released, unused)
	return nil
}

// chunks hands out its data at most size bytes a read and records Close.
type chunks struct {
	data   []byte
	size   int
	closed bool
}

func (c *chunks) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), c.size)], c.data)
	c.data = c.data[n:]
	return n, nil
}

func (c *chunks) Close() error { c.closed = true; return nil }

func read(t *testing.T, r io.Reader, n int) []byte {
	t.Helper()
	buf := make([]byte, n)
	k, err := r.Read(buf)
	if err != nil {
		t.Fatalf("read %d: %v", n, err)
	}
	return buf[:k]
}

// With room, the first read reserves Step past its end and the reads it
// covers reserve nothing more; Close gives back the rest once.
func TestReaderReservesAhead(t *testing.T) {
	q := &quota{room: 1 << 40}
	src := &chunks{data: bytes.Repeat([]byte("x"), 3000), size: 1000}
	r := New(src, 0, q.reserve, q.release)
	for range 3 {
		read(t, r, 1000)
	}
	if n, err := r.Read(make([]byte, 1000)); n != 0 || err != io.EOF {
		t.Fatalf("the end: %d bytes, %v", n, err)
	}
	if want := [][3]int64{{0, 1000, 1000 + Step}}; !slices.Equal(q.reserves, want) {
		t.Fatalf("reservations %v, want %v", q.reserves, want)
	}
	if err := r.Close(); err != nil || !src.closed {
		t.Fatalf("close: %v, stream closed %v", err, src.closed)
	}
	if err := r.Close(); err != nil || !slices.Equal(q.released, []int64{1000 + Step - 3000}) {
		t.Fatalf("released %v (second close: %v), want the unused part once", q.released, err)
	}
	if _, err := r.Read(make([]byte, 1)); !errors.Is(err, ErrReleased) {
		t.Fatalf("a read after close: %v", err)
	}
}

// Near the limit a reservation gets only what fits, at least the chunk in
// hand; the next chunk reserves again, and one past the room is refused
// before any of its bytes pass.
func TestReaderNearTheLimit(t *testing.T) {
	q := &quota{room: 2500}
	src := &chunks{data: bytes.Repeat([]byte("y"), 4000), size: 1000}
	r := New(src, 0, q.reserve, q.release)
	for range 2 {
		read(t, r, 1000)
	}
	if want := [][3]int64{{0, 1000, 1000 + Step}}; !slices.Equal(q.reserves, want) {
		t.Fatalf("reservations %v, want %v", q.reserves, want)
	}
	q.room = 3000 // another stream gave some back
	read(t, r, 1000)
	buf := make([]byte, 1000)
	n, err := r.Read(buf)
	if n != 0 || !errors.Is(err, errRefused) || r.Err() != err || r.Passed() != 3000 {
		t.Fatalf("past the room: %d bytes, %v (Err %v), passed %d", n, err, r.Err(), r.Passed())
	}
	if n, again := r.Read(buf); n != 0 || again != err || len(src.data) != 0 {
		t.Fatalf("after a refusal: %d bytes, %v, %d left unread", n, again, len(src.data))
	}
	if want := [][3]int64{{0, 1000, 1000 + Step}, {2500, 3000, 3000 + Step}, {3000, 4000, 4000 + Step}}; !slices.Equal(q.reserves, want) {
		t.Fatalf("reservations %v, want %v", q.reserves, want)
	}
	if err := r.Release(); err != nil || len(q.released) != 0 {
		t.Fatalf("every reserved byte passed, yet released %v (%v)", q.released, err)
	}
}

// A reservation that fails mid-stream ends it with that error, and
// Release gives back what was reserved past the bytes that passed.
func TestReaderReserveErrorMidStream(t *testing.T) {
	q := &quota{room: 1 << 40}
	src := &chunks{data: bytes.Repeat([]byte("z"), 3*Step), size: 3 * Step / 4}
	r := New(src, 0, q.reserve, q.release)
	read(t, r, Step) // reserves up to 7/4 Step
	read(t, r, Step)
	down := errors.New("database away")
	q.fail = down
	if n, err := r.Read(make([]byte, Step)); n != 0 || !errors.Is(err, down) || !errors.Is(r.Err(), down) {
		t.Fatalf("the failed reservation: %d bytes, %v", n, err)
	}
	if err := r.Release(); err != nil || !slices.Equal(q.released, []int64{Step / 4}) {
		t.Fatalf("released %v (%v)", q.released, err)
	}
}

// Bytes covered from the start pass without reserving, and a stream that
// never passed them has nothing of its own to give back.
func TestReaderStartsCovered(t *testing.T) {
	q := &quota{room: 1 << 40}
	r := New(&chunks{data: bytes.Repeat([]byte("w"), 300), size: 100}, 250, q.reserve, q.release)
	read(t, r, 100)
	read(t, r, 100)
	if len(q.reserves) != 0 {
		t.Fatalf("reserved within the covered start: %v", q.reserves)
	}
	read(t, r, 100)
	if want := [][3]int64{{250, 300, 300 + Step}}; !slices.Equal(q.reserves, want) {
		t.Fatalf("reservations %v, want %v", q.reserves, want)
	}
	if _ = r.Release(); !slices.Equal(q.released, []int64{Step}) {
		t.Fatalf("released %v, want %d", q.released, Step)
	}

	q = &quota{room: 1 << 40}
	r = New(&chunks{data: []byte("short"), size: 100}, 250, q.reserve, q.release)
	if _, err := io.ReadAll(r); err != nil || r.Release() != nil || len(q.released) != 0 || len(q.reserves) != 0 {
		t.Fatalf("a stream within its covered start: %v, reserved %v, released %v", err, q.reserves, q.released)
	}
}

// A reservation that answers less than the chunk in hand without an
// error still stops the stream: no byte passes unreserved.
func TestReaderShortReservation(t *testing.T) {
	r := New(&chunks{data: []byte("abcdef"), size: 6}, 0, func(covered, need, want int64) (int64, error) { return need - 1, nil }, nil)
	if n, err := r.Read(make([]byte, 6)); n != 0 || err == nil {
		t.Fatalf("a short reservation passed %d bytes (%v)", n, err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("close without a release function: %v", err)
	}
}
