package events

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/gpuaas/gpuaas/internal/clock"
	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/wakeup"
)

// Reader serves events from the outbox, the durable truth: lists and the
// live stream read the same sequenced rows, so a stream is correct on any
// replica and resumes exactly across restarts.
type Reader struct {
	Log Log
	// Wake: streams wait on wakeup.EventsSequenced and wakeup.AccessChanged.
	Wake *wakeup.Hub
	// KeepAlive is the period of SSE comment lines on an idle stream.
	KeepAlive time.Duration
	// Reauthorize is how often an open stream re-checks that its reader
	// still has access (Access.Recheck); 0 checks only on access changes.
	Reauthorize time.Duration
	// Poll re-reads the outbox when no wake-up arrives (a wake-up lost
	// with a NATS outage costs at most this much latency).
	Poll time.Duration
	// WriteTimeout bounds each flush to a stream client. Streams read the
	// outbox, so a slow consumer holds no buffer here; one that stops
	// draining its connection for this long is disconnected and resumes
	// later with Last-Event-ID.
	WriteTimeout time.Duration
	// Now is the clock that issued the readers' tokens, against which a
	// stream ends when its token expires; nil is the wall clock.
	Now func() time.Time

	stopOnce sync.Once
	stop     chan struct{}
}

// Shutdown ends every stream (the server is draining); clients resume
// elsewhere with Last-Event-ID.
func (rd *Reader) Shutdown() {
	rd.stopCh()
	rd.stopOnce.Do(func() { close(rd.stop) })
}

var readerInit sync.Mutex

func (rd *Reader) stopCh() <-chan struct{} {
	readerInit.Lock()
	defer readerInit.Unlock()
	if rd.stop == nil {
		rd.stop = make(chan struct{})
	}
	return rd.stop
}

// Cursor is the opaque list cursor: the position after which to read.
func Cursor(pos int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte("p" + strconv.FormatInt(pos, 10)))
}

// ParseCursor reads a list cursor.
func ParseCursor(c string) (int64, error) {
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err == nil && len(raw) > 1 && raw[0] == 'p' {
		if n, err := strconv.ParseInt(string(raw[1:]), 10, 64); err == nil && n >= 0 {
			return n, nil
		}
	}
	return 0, errdefs.Invalid("invalid_cursor", "the cursor is not one this server issued; start again without a cursor")
}

// List returns one page of events matching f after position `after`, and
// the cursor of the next page ("" at the current end). A page that
// continues a cursor (after > 0) is checked against retention
// (CheckRetained) after it is read: retention deletes a prefix, so a cursor
// still retained then had nothing after it deleted before the read, whereas
// one checked only before could lose its successors to the cleaner in
// between, and the page would start after a silent gap.
func (rd *Reader) List(ctx context.Context, f EventFilter, after int64, limit int) ([]Envelope, string, error) {
	rows, err := rd.Log.Read().ListEvents(ctx, f, after, limit+1)
	if err != nil {
		return nil, "", err
	}
	if after > 0 {
		if err := rd.CheckRetained(ctx, f, after); err != nil {
			return nil, "", err
		}
	}
	next := ""
	if len(rows) > limit {
		rows = rows[:limit]
		next = Cursor(rows[len(rows)-1].Position)
	}
	out := make([]Envelope, len(rows))
	for i, e := range rows {
		out[i] = FromStore(e)
	}
	return out, next, nil
}

// ResumeNow as a Last-Event-ID streams only events after the newest one.
const ResumeNow = "now"

// ResumePoint turns a Last-Event-ID (a sequence, or an event id) into the
// position to stream after, within the caller's scope f (its org and
// project; empty for the platform); "now" is the newest event, so only later
// ones stream. A point older than retention is 410 cursor_expired naming the
// oldest event retained in that scope, never a silent skip. An event id
// outside the scope is answered exactly like an unknown one: its position is
// never revealed. A stream's filter is checked here too (EventFilter.Check),
// since both stream handlers call this before they answer: a bound the
// store refuses must be a 400, not a stream that opens and then ends.
func (rd *Reader) ResumePoint(ctx context.Context, f EventFilter, lastEventID string) (int64, error) {
	if err := f.Check(); err != nil {
		return 0, err
	}
	switch lastEventID {
	case "":
		return 0, nil
	case ResumeNow:
		_, newest, err := rd.Log.Read().EventBounds(ctx)
		return newest, err
	}
	if n, err := strconv.ParseInt(lastEventID, 10, 64); err == nil && n >= 0 {
		return n, rd.CheckRetained(ctx, f, n)
	}
	if _, err := uuid.Parse(lastEventID); err != nil {
		return 0, errdefs.Invalid("invalid_last_event_id", "Last-Event-ID must be an event's sequence (the SSE id) or its event id")
	}
	pos, err := rd.Log.Read().EventPosition(ctx, lastEventID)
	if err != nil && errdefs.KindOf(err) != errdefs.KindNotFound {
		return 0, err
	}
	if err == nil {
		// In scope exactly when the scope's first event after pos-1 is it.
		rows, err := rd.Log.Read().ListEvents(ctx, scopeOf(f), pos-1, 1)
		if err != nil {
			return 0, err
		}
		if len(rows) == 1 && rows[0].Position == pos {
			return pos, nil
		}
	}
	return 0, rd.expired(ctx, f)
}

// scopeOf keeps only the tenant part of a filter (org, project).
func scopeOf(f EventFilter) EventFilter {
	return EventFilter{OrgID: f.OrgID, ProjectID: f.ProjectID}
}

// CheckRetained refuses a resume point whose successors were deleted.
// Positions are contiguous and retention deletes a prefix, so position p is
// resumable exactly when p+1 is still retained (or nothing was deleted).
// The refusal names only events of the caller's scope f.
func (rd *Reader) CheckRetained(ctx context.Context, f EventFilter, after int64) error {
	oldest, newest, err := rd.Log.Read().EventBounds(ctx)
	if err != nil {
		return err
	}
	if after > newest && after > 0 {
		return errdefs.Invalid("invalid_cursor", "sequence %d is ahead of the newest event; resume from an id this stream sent", after)
	}
	if oldest > 1 && after+1 < oldest {
		return rd.expired(ctx, f)
	}
	return nil
}

// expired is the 410 of a resume point past retention: details name the
// oldest event still retained in the caller's scope (oldest_sequence,
// oldest_event_id), and are empty when the scope has none.
func (rd *Reader) expired(ctx context.Context, f EventFilter) error {
	details := map[string]any{}
	rows, err := rd.Log.Read().ListEvents(ctx, scopeOf(f), 0, 1)
	if err != nil {
		return err
	}
	msg := "the events after this point are past retention and none of this scope's events are retained; stream without a resume point"
	if len(rows) == 1 {
		details["oldest_sequence"], details["oldest_event_id"] = rows[0].Position, rows[0].ID
		msg = fmt.Sprintf("the events after this point are past retention; resume from the oldest retained event (sequence %d) or list from the start", rows[0].Position)
	}
	return errdefs.Gone("cursor_expired", "%s", msg).WithDetails(details)
}

// Framing writes one stream's messages in its wire format: SSE (Stream)
// or WebSocket (StreamWebSocket). Follow drives it; Event buffers one event,
// Flush sends what is buffered, Idle marks a quiet period (keep-alive), End
// sends the last message of a stream whose reader lost access and closes.
// Flush and Idle must give up after Reader.WriteTimeout: that is how a
// consumer that falls too far behind is disconnected.
type Framing interface {
	Event(pos int64, typ string, envelope []byte) error
	Flush() error
	Idle() error
	End(r *Revoked) error
}

// ErrStreamExpired ends a stream whose next events retention deleted
// before it read them (it fell behind retention while it read, having
// resumed near its edge): it stops instead of skipping them silently, and
// its reader, resuming with its last id, is answered cursor_expired.
var ErrStreamExpired = errors.New("event stream: the events after its position are past retention")

// ErrSlowConsumer ends a stream whose client did not take its data within
// Reader.WriteTimeout; the client resumes with its last id.
var ErrSlowConsumer = errors.New("event stream: the client fell too far behind and was disconnected")

// Follow sends matching events after position `after` through fr until ctx
// ends, the reader shuts down, a write fails or the reader loses access
// (acc): the one subscription and backlog path of every stream framing. It
// re-reads the outbox when the hub wakes it (this replica committed or the
// relay sequenced), or at least every Poll, and calls fr.Idle every
// KeepAlive on a quiet stream. It ends the stream at the token's expiry and
// when acc.Recheck revokes it — checked every Reauthorize, on the hub's
// AccessChanged and after an iam.* event — with fr.End, returning the
// *Revoked. It returns ErrStreamExpired when retention deleted events
// after its position before it read them.
func (rd *Reader) Follow(ctx context.Context, f EventFilter, after int64, fr Framing, acc Access) error {
	keepAlive := time.NewTicker(rd.KeepAlive)
	defer keepAlive.Stop()
	poll := time.NewTimer(rd.Poll)
	defer poll.Stop()
	var recheck, expiry <-chan time.Time
	if acc.Recheck != nil && rd.Reauthorize > 0 {
		t := time.NewTicker(rd.Reauthorize)
		defer t.Stop()
		recheck = t.C
	}
	if !acc.Expires.IsZero() {
		t := time.NewTimer(acc.Expires.Sub(clock.Or(rd.Now)())) // by the clock that issued the token
		defer t.Stop()
		expiry = t.C
	}
	end := func(r *Revoked) error {
		if err := fr.End(r); err != nil {
			return errors.Join(r, err)
		}
		return r
	}
	q := rd.Log.Read()
	stop := rd.stopCh()
	check := true // once at the start: access may have changed since the handler checked it
	for {
		if acc.expired(clock.Or(rd.Now)()) {
			return end(TokenExpired())
		}
		wake := rd.Wake.Wait(wakeup.EventsSequenced) // before reading, so no notice falls between
		changed := rd.Wake.Wait(wakeup.AccessChanged)
		if check {
			if r := acc.recheck(ctx); r != nil {
				return end(r)
			}
			check = false
		}
		rows, err := q.ListEvents(ctx, f, after, 500)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if after > 0 && len(rows) > 0 && rows[0].Position > after+1 {
			// A gap: the rows between are outside f, or retention deleted
			// them before this read. Retention deletes a prefix of the
			// contiguous positions, so some may have been deleted exactly
			// when after+1 is gone; then end rather than skip them.
			if err := rd.CheckRetained(ctx, f, after); err != nil {
				if errdefs.KindOf(err) == errdefs.KindGone {
					return fmt.Errorf("%w: %w", ErrStreamExpired, err)
				}
				return err
			}
		}
		for _, e := range rows {
			b, err := json.Marshal(FromStore(e))
			if err != nil {
				return err
			}
			if err := fr.Event(e.Position, e.Type, b); err != nil {
				return err
			}
			after = e.Position
			if strings.HasPrefix(e.Type, "iam.") {
				// It may report the reader's own loss of access: re-check
				// before sending anything after it, which it may no longer
				// read.
				check = true
				break
			}
		}
		if len(rows) > 0 {
			if err := fr.Flush(); err != nil {
				return err
			}
		}
		if len(rows) == 500 || check {
			// More to read at once (a reader catching up reads batch after
			// batch): still heed what a wait would, so an access change,
			// the re-check period or a shutdown is not put off until the
			// reader has caught up with the head.
			select {
			case <-ctx.Done():
				return nil
			case <-stop:
				return nil
			case <-recheck:
				check = true
			case <-changed:
				check = true
			default:
			}
			continue
		}
		poll.Reset(rd.Poll)
		select {
		case <-ctx.Done():
			return nil
		case <-stop:
			return nil
		case <-wake:
		case <-poll.C:
		case <-keepAlive.C:
			if err := fr.Idle(); err != nil {
				return err
			}
		case <-expiry:
			return end(TokenExpired())
		case <-recheck:
			check = true
		case <-changed:
			check = true
		}
	}
}

// Stream writes matching events after position `after` as Server-Sent
// Events until ctx ends or the client falls behind: `id` is the sequence,
// `event` the type, `data` the CloudEvents envelope. Validate the resume
// point (ResumePoint) before calling: once Stream starts, the status is 200.
// A reader that loses access (acc) gets one `event: error` message naming
// the reason, and the stream closes.
func (rd *Reader) Stream(ctx context.Context, w http.ResponseWriter, f EventFilter, after int64, acc Access) error {
	rc := http.NewResponseController(w)
	// The server's read and write timeouts are for requests, not streams:
	// clear them (an expired read deadline would cancel the request's
	// context), and bound each write instead.
	_ = rc.SetWriteDeadline(time.Time{})
	_ = rc.SetReadDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	s := &sseFraming{ctx: ctx, rc: rc, bw: bufio.NewWriterSize(w, 32<<10), timeout: rd.WriteTimeout}
	// The opening names the resume point (the sequence "now" resolved to):
	// a client that reconnects before the first event resumes there.
	open := fmt.Sprintf("retry: 1000\n: stream after %d\n\n", after)
	if after > 0 {
		open = fmt.Sprintf("retry: 1000\nid: %d\n: stream after %d\n\n", after, after)
	}
	if _, err := fmt.Fprint(s.bw, open); err != nil {
		return err
	}
	if err := s.Flush(); err != nil {
		return err
	}
	return rd.Follow(ctx, f, after, s, acc)
}

type sseFraming struct {
	ctx     context.Context
	rc      *http.ResponseController
	bw      *bufio.Writer
	timeout time.Duration
	armed   bool // the write deadline is set for the batch being written
}

// arm bounds the writes of one batch (the buffer may spill to the
// connection while events are added, not only at Flush).
func (s *sseFraming) arm() {
	if !s.armed && s.timeout > 0 {
		_ = s.rc.SetWriteDeadline(time.Now().Add(s.timeout))
	}
	s.armed = true
}

func (s *sseFraming) Event(pos int64, typ string, env []byte) error {
	s.arm()
	_, err := fmt.Fprintf(s.bw, "id: %d\nevent: %s\ndata: %s\n\n", pos, typ, env)
	return slow(err)
}

func (s *sseFraming) Flush() error {
	s.arm()
	s.armed = false
	err := s.bw.Flush()
	if err == nil {
		err = s.rc.Flush()
	}
	return slow(err)
}

func (s *sseFraming) Idle() error {
	s.arm()
	if _, err := s.bw.WriteString(": keep-alive\n\n"); err != nil {
		return slow(err)
	}
	return s.Flush()
}

func (s *sseFraming) End(r *Revoked) error {
	s.arm()
	if _, err := fmt.Fprintf(s.bw, "event: error\ndata: %s\n\n", r.body(s.ctx)); err != nil {
		return slow(err)
	}
	return s.Flush()
}

// slow reports a write that hit its deadline as ErrSlowConsumer.
func slow(err error) error {
	var ne net.Error
	if errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return fmt.Errorf("%w (%v)", ErrSlowConsumer, err)
	}
	return err
}
