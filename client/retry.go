package client

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// RetryPolicy has a Client send a request again when the server refused it
// for now, waiting as long as the server asked. It is opt-in
// (Client.Retry); without it every refusal goes to the caller at once, with
// its wait in APIError.RetryAfter.
//
// A 429 is always sent again, whatever the method: every rate limit of the
// API refuses before anything is done (and a keyed request's claim is given
// back), so the retry cannot act twice. A 503 is sent again only for a GET
// or HEAD, a change carrying an idempotency key (Do gives every POST and
// PUT one), or a report the server dedupes by its events' ids
// (dedupedByEventID): an unavailable database may have failed a change
// after it committed, and only the key or the ids make sending it again
// safe. Each retry
// carries the same X-Request-ID and idempotency key as the first try. A
// request whose body is a stream (a blob or release upload) is not sent
// again: its bytes are gone.
type RetryPolicy struct {
	// Retries is how many times one request is sent again at most (0: 3).
	Retries int
	// MaxWait is the longest one wait (0: 30 s). A refusal whose
	// Retry-After asks for longer is returned at once rather than sent
	// again early, where the server would only refuse it again (a sign-in
	// locked out for 15 minutes); the 1 s doubling wait used when the
	// server names none stops growing at MaxWait.
	MaxWait time.Duration
	// OnRetry, when set, is told of each retry just before its wait, so a
	// caller can say why the call pauses. It is called only for a request
	// that is sent again once the wait is over (unless the context ends
	// during it), on the goroutine making the call.
	OnRetry func(RetryNotice)

	// sleep waits d or until ctx ends (nil: a timer); tests record the
	// waits instead.
	sleep func(ctx context.Context, d time.Duration) error
}

// RetryNotice is what a RetryPolicy's OnRetry is told of one retry.
type RetryNotice struct {
	// Refusal is the server's answer that refused the request: its
	// Status (429 or 503), Code, Message and RetryAfter.
	Refusal *APIError
	// Wait is how long the policy waits before sending the request again.
	Wait time.Duration
	// Retry counts this request's retries, from 1; Retries is the most
	// the policy makes.
	Retry, Retries int
}

// Defaults of a RetryPolicy's zero fields.
const (
	defaultRetries      = 3
	defaultMaxRetryWait = 30 * time.Second
	// firstRetryWait is the wait after a refusal without a (readable)
	// Retry-After, doubled after each further one.
	firstRetryWait = time.Second
)

// next says whether the request req, answered resp after refused earlier
// refusals, is sent again, and after how long.
func (p *RetryPolicy) next(req *http.Request, resp *http.Response, refused int, now time.Time) (time.Duration, bool) {
	if p == nil {
		return 0, false
	}
	if refused >= p.retries() || !resendable(req) {
		return 0, false
	}
	switch resp.StatusCode {
	case http.StatusTooManyRequests:
	case http.StatusServiceUnavailable:
		if !repeatable(req) {
			return 0, false
		}
	default:
		return 0, false
	}
	d, ok := retryAfter(resp.Header.Get("Retry-After"), now)
	if !ok {
		return min(firstRetryWait<<min(refused, 30), p.maxWait()), true
	}
	if d > p.maxWait() {
		return 0, false
	}
	return d, true
}

// retries is the most retries p makes of one request.
func (p *RetryPolicy) retries() int {
	if p.Retries <= 0 {
		return defaultRetries
	}
	return p.Retries
}

// maxWait is the longest wait p allows (also without a policy: the
// default).
func (p *RetryPolicy) maxWait() time.Duration {
	if p == nil || p.MaxWait <= 0 {
		return defaultMaxRetryWait
	}
	return p.MaxWait
}

// wait waits d, or returns ctx's error as soon as ctx ends.
func (p *RetryPolicy) wait(ctx context.Context, d time.Duration) error {
	return waitFor(ctx, d, p.sleep)
}

// waitFor waits d with sleep (a test's recorder), or, when it is nil, a
// timer, returning ctx's error as soon as ctx ends.
func waitFor(ctx context.Context, d time.Duration, sleep func(context.Context, time.Duration) error) error {
	if sleep != nil {
		return sleep(ctx, d)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// repeatable reports whether the server may see req twice: a read, a
// change it recognises by its idempotency key (either header the API
// reads; an empty one is no key), or one whose method marked it
// dedupedByEventID.
func repeatable(req *http.Request) bool {
	return req.Method == http.MethodGet || req.Method == http.MethodHead ||
		req.Header.Get("X-Idempotency-Key") != "" || req.Header.Get("Idempotency-Key") != "" ||
		req.Context().Value(dedupedKey{}) != nil
}

type dedupedKey struct{}

// dedupedByEventID marks a request the server recognises by its content
// rather than by an idempotency key: a CloudEvents batch whose every event
// the server records once by its source and id, answering a repeat as a
// duplicate (app usage: billing's durable dedupe key; runtime events other
// than heartbeats: the timeline row's). A RetryPolicy sends it again after
// a 503 as it would a keyed change. Only the method that builds the batch
// knows what it holds, so the method sets it, not a list of paths here.
// The mark rides in the request's context: it is the client's, never sent.
func dedupedByEventID(r *http.Request) {
	*r = *r.WithContext(context.WithValue(r.Context(), dedupedKey{}, true))
}

// resendable reports whether req's body can be sent again: none, or one
// net/http can rewind (the client's JSON bodies are bytes).
func resendable(req *http.Request) bool {
	return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
}

// rewound is req ready to be sent again: the same headers, a fresh copy of
// its body.
func rewound(req *http.Request) (*http.Request, error) {
	again := req.Clone(req.Context())
	if req.GetBody != nil {
		body, err := req.GetBody()
		if err != nil {
			return nil, err
		}
		again.Body = body
	}
	return again, nil
}

// roundTrip sends req through c.HTTP and, as c.Retry allows, again after
// each refusal. When ctx ends during a wait, the error is the refusal's
// *APIError wrapped with ctx's error.
func (c *Client) roundTrip(req *http.Request) (*http.Response, error) {
	for refused := 0; ; refused++ {
		resp, err := c.HTTP.Do(req)
		if err != nil {
			return nil, err
		}
		d, again := c.Retry.next(req, resp, refused, time.Now())
		if !again {
			return resp, nil
		}
		refusal := decodeResponse(req, resp, nil, 1<<20) // reads and closes it, so the connection is reused
		resend, err := rewound(req)
		if err != nil {
			return nil, fmt.Errorf("%w; could not send it again: %w", refusal, err)
		}
		if c.Retry.OnRetry != nil {
			c.Retry.OnRetry(RetryNotice{Refusal: refusalOf(resp, refusal), Wait: d, Retry: refused + 1, Retries: c.Retry.retries()})
		}
		if err := c.Retry.wait(req.Context(), d); err != nil {
			return nil, fmt.Errorf("%w; stopped waiting %s to send it again: %w", refusal, d, err)
		}
		req = resend
	}
}

// refusalOf is the refusal resp as an *APIError: err, the error decoding
// it gave, unless reading its body failed.
func refusalOf(resp *http.Response, err error) *APIError {
	if api, ok := errors.AsType[*APIError](err); ok {
		return api
	}
	return &APIError{Status: resp.StatusCode, Code: "http_error", Message: err.Error(),
		RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())}
}

// parseRetryAfter reads a Retry-After header: delay seconds or an HTTP
// date; 0 when there is none, it is unreadable, or the date has gone by.
func parseRetryAfter(v string, now time.Time) time.Duration {
	d, _ := retryAfter(v, now)
	return d
}

// retryAfter reads a Retry-After header: delay seconds or an HTTP date (a
// date gone by is 0). ok is false when there is none or it is unreadable.
// Delay seconds are ASCII digits only (RFC 9110: 1*DIGIT), as the Python
// SDK reads them: strconv would take "+5" and "-0" too, which no server
// means. A delay too large for a Duration is the largest one (every caller
// caps it).
func retryAfter(v string, now time.Time) (d time.Duration, ok bool) {
	if v == "" {
		return 0, false
	}
	if strings.Trim(v, "0123456789") == "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil || s > uint64(math.MaxInt64/time.Second) { // only a range error is left
			return math.MaxInt64, true
		}
		return time.Duration(s) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}
