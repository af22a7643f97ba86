package gateway

import (
	"context"
	"errors"
	"io"
	"time"
)

// An answer the app streams (server-sent events, a long download, a model's
// tokens) can last far longer than the app token it was asked for. Like a
// WebSocket (watchUpgrade), it must not outlive the person's access: each
// time a piece of it arrives past the point the access was last known good,
// the grant is re-checked (Backend.RecheckUI) before the piece is passed on,
// and a refusal ends the answer there. A stream that sends nothing passes
// nothing on, so checking when data arrives is enough, and costs no timer
// or goroutine per request.

var errAccessEnded = errors.New("the person's access to this app ended while its answer streamed")

// heldAccess is the access an answer streams under: the claims of the app
// token it was asked with, good until until without a re-check.
type heldAccess struct {
	g      *Gateway
	claims appClaims
	until  time.Time
}

func (g *Gateway) hold(claims appClaims) heldAccess {
	return heldAccess{g: g, claims: claims, until: claims.ExpiresAt.Time}
}

// still reports whether the answer may go on: past until the grant is
// re-checked, and held one token lifetime more when allowed. A refusal,
// or a re-check that cannot tell, ends it, as it closes a WebSocket.
func (h *heldAccess) still() error {
	now := h.g.cfg.Now()
	if now.Before(h.until) {
		return nil
	}
	if err := h.g.cfg.Backend.RecheckUI(context.Background(), h.claims.grant()); err != nil {
		h.g.cfg.Logger.Info("ui gateway: a streamed answer's access ended", "err", err,
			"user", h.claims.Subject, "instance", h.claims.Instance)
		return errAccessEnded
	}
	h.until = now.Add(h.g.cfg.TokenTTL)
	return nil
}

// heldReader passes on what r yields while the access holds; a piece that
// arrives once it has ended is not passed on.
type heldReader struct {
	r      io.Reader
	access heldAccess
}

func (h *heldReader) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	if n > 0 {
		if aerr := h.access.still(); aerr != nil {
			return 0, aerr
		}
	}
	return n, err
}

// heldBody is an answer's body from the app on the console's listener.
type heldBody struct {
	heldReader
	io.Closer
}
