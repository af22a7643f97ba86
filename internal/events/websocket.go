package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/gpuaas/gpuaas/internal/correlation"
	"github.com/gpuaas/gpuaas/internal/errdefs"
)

// WebSocket form of the stream (for browsers, which cannot set headers on an
// EventSource or a WebSocket). Same subscription and backlog path as SSE
// (Reader.Follow); only the framing differs:
//
//   - every text message is one CloudEvents envelope (its "sequence" is the
//     resume point, like the SSE id);
//   - keep-alives are WebSocket pings every KeepAlive; a client that does
//     not answer, or does not take a message, within WriteTimeout is
//     disconnected (it resumes from its last id like after any disconnect);
//   - an error after the upgrade (cursor_expired) is one text message
//     {"error": {…the REST error envelope…}} followed by a close with
//     CloseCursorExpired and a reason naming the oldest retained sequence.
const (
	// WebSocketProtocol is the subprotocol a client must offer (and gets back).
	WebSocketProtocol = "gpuaas.events.v1"
	// WebSocketBearerPrefix marks the access token offered as a second
	// subprotocol: "bearer.<token>" (browsers cannot send Authorization on
	// a WebSocket). The server never echoes it.
	WebSocketBearerPrefix = "bearer."
	// CloseCursorExpired is the close code of a resume point past retention
	// (the 410 of the HTTP stream, in the 4000–4999 application range).
	CloseCursorExpired websocket.StatusCode = 4410
	// CloseServerShutdown: the replica is draining; resume elsewhere.
	CloseServerShutdown = websocket.StatusGoingAway
	// CloseSlowConsumer: the client fell too far behind; resume from its id.
	CloseSlowConsumer = websocket.StatusPolicyViolation
)

// BearerFromProtocols returns the token offered in Sec-WebSocket-Protocol as
// "bearer.<token>", if any.
func BearerFromProtocols(header []string) string {
	for _, h := range header {
		for _, p := range strings.Split(h, ",") {
			if p = strings.TrimSpace(p); strings.HasPrefix(p, WebSocketBearerPrefix) {
				return p[len(WebSocketBearerPrefix):]
			}
		}
	}
	return ""
}

// StreamWebSocket serves matching events after position `after` on an
// accepted WebSocket until the client goes away, the reader shuts down or
// the client falls behind; it closes the connection with a status that
// says which.
// A reader that loses access (acc) gets one {"error": …} message naming the
// reason, then a close with CloseUnauthenticated or CloseAccessRevoked.
func (rd *Reader) StreamWebSocket(ctx context.Context, c *websocket.Conn, f EventFilter, after int64, acc Access) error {
	c.SetReadLimit(4096) // clients send nothing but control frames
	// CloseRead answers pings and reads pongs and the close frame; its
	// context ends when the client goes away.
	ctx = c.CloseRead(ctx)
	err := rd.Follow(ctx, f, after, &wsFraming{ctx: ctx, c: c, timeout: rd.WriteTimeout}, acc)
	var revoked *Revoked
	switch {
	case errors.As(err, &revoked):
		return err // End closed the connection
	case err == nil && ctx.Err() == nil:
		_ = c.Close(CloseServerShutdown, "server shutting down; resume with last_event_id")
		return nil
	case err == nil:
		_ = c.CloseNow()
		return nil
	case errors.Is(err, ErrSlowConsumer):
		_ = c.CloseNow() // the client is not reading: no close handshake
		return err
	case errors.Is(err, ErrStreamExpired):
		// As a resume point past retention is refused at the upgrade.
		var e *errdefs.Error
		errors.As(err, &e)
		RefuseWebSocket(ctx, c, map[string]any{"code": e.Code, "message": e.Message,
			"correlation_id": correlation.ID(ctx), "details": e.Details}, e)
		return err
	default:
		_ = c.Close(websocket.StatusInternalError, "stream failed; resume with last_event_id")
		return err
	}
}

// RefuseWebSocket ends an accepted WebSocket with an error: one message
// {"error": …} in the REST error shape, then a close whose code is
// CloseCursorExpired for cursor_expired (reason
// "cursor_expired oldest_sequence=N", or "cursor_expired" when the scope
// retains no event) and 1008 otherwise.
func RefuseWebSocket(ctx context.Context, c *websocket.Conn, envelope any, err error) {
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if b, merr := json.Marshal(map[string]any{"error": envelope}); merr == nil {
		_ = c.Write(wctx, websocket.MessageText, b)
	}
	var e *errdefs.Error
	if errors.As(err, &e) && e.Code == "cursor_expired" {
		reason := "cursor_expired"
		if n, ok := e.Details["oldest_sequence"]; ok {
			reason = fmt.Sprintf("cursor_expired oldest_sequence=%v", n)
		}
		_ = c.Close(CloseCursorExpired, reason)
		return
	}
	_ = c.Close(websocket.StatusPolicyViolation, "refused")
}

type wsFraming struct {
	ctx     context.Context
	c       *websocket.Conn
	timeout time.Duration
	pending [][]byte
}

func (w *wsFraming) Event(_ int64, _ string, env []byte) error {
	w.pending = append(w.pending, env)
	return nil
}

func (w *wsFraming) deadline() (context.Context, context.CancelFunc) {
	if w.timeout <= 0 {
		return context.WithCancel(w.ctx)
	}
	return context.WithTimeout(w.ctx, w.timeout)
}

func (w *wsFraming) Flush() error {
	ctx, cancel := w.deadline()
	defer cancel()
	for i, b := range w.pending {
		if err := w.c.Write(ctx, websocket.MessageText, b); err != nil {
			w.pending = w.pending[:0]
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return ErrSlowConsumer
			}
			return err
		}
		w.pending[i] = nil
	}
	w.pending = w.pending[:0]
	return nil
}

func (w *wsFraming) End(r *Revoked) error {
	ctx, cancel := w.deadline()
	defer cancel()
	err := w.c.Write(ctx, websocket.MessageText, r.body(w.ctx))
	if err != nil {
		_ = w.c.CloseNow()
		return err
	}
	return w.c.Close(r.closeCode(), r.Reason)
}

func (w *wsFraming) Idle() error {
	ctx, cancel := w.deadline()
	defer cancel()
	if err := w.c.Ping(ctx); err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return ErrSlowConsumer
		}
		return err
	}
	return nil
}
