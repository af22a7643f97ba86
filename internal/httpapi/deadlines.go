package httpapi

import (
	"net/http"
	"time"
)

// The server's ReadTimeout and WriteTimeout bound every request, so a body
// trickled a byte at a time cannot hold a connection. Routes that stream
// large bodies (blob uploads, the registry) get a longer, per-request
// deadline instead; a long-lived response such as an event stream opts out
// of the write deadline altogether.

// ExtendDeadlines moves the connection's read and write deadlines to d from
// now (d <= 0 leaves them as they are). Streaming handlers call it, or get it
// from the route table (route.stream).
func ExtendDeadlines(w http.ResponseWriter, d time.Duration) {
	if d <= 0 {
		return
	}
	rc := http.NewResponseController(w)
	at := time.Now().Add(d)
	_ = rc.SetReadDeadline(at)
	_ = rc.SetWriteDeadline(at)
}

// NoWriteDeadline lifts the write deadline for a response that stays open
// for as long as the client listens (server-sent events). The read deadline
// still applies: such routes take no request body. The handler must end
// when the request context ends.
func NoWriteDeadline(w http.ResponseWriter) error {
	return http.NewResponseController(w).SetWriteDeadline(time.Time{})
}

// WithStreamDeadlines wraps a mounted handler (the OCI registry) so each of
// its requests gets the stream deadline.
func (a *API) WithStreamDeadlines(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ExtendDeadlines(w, a.StreamTimeout)
		h.ServeHTTP(w, r)
	})
}
