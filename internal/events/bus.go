package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// StreamSettings configure the JetStream stream events are published to.
type StreamSettings struct {
	Name string // default GPUAAS_EVENTS
	// DuplicateWindow is how long JetStream remembers message ids: a row
	// republished within it (after a relay crash between the ack and the
	// outbox update) is dropped by the server.
	DuplicateWindow time.Duration
	MaxAge          time.Duration // how long the stream keeps events (0: forever)
}

// Bus is the connection to NATS JetStream the relay publishes through.
type Bus struct {
	NC       *nats.Conn
	JS       jetstream.JetStream
	Settings StreamSettings
	logger   *slog.Logger
}

// NewBus wraps a connection and tries once to create the event stream.
func NewBus(ctx context.Context, nc *nats.Conn, s StreamSettings, logger *slog.Logger) (*Bus, error) {
	if s.Name == "" {
		s.Name = "GPUAAS_EVENTS"
	}
	if s.DuplicateWindow <= 0 {
		s.DuplicateWindow = 10 * time.Minute
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096), jetstream.WithPublishAsyncTimeout(5*time.Second))
	if err != nil {
		return nil, err
	}
	b := &Bus{NC: nc, JS: js, Settings: s, logger: logger}
	// NATS may be down now; the relay ensures the stream before it
	// publishes, and again after every failure, so startup never waits.
	if err := b.EnsureStream(ctx); err != nil {
		logger.WarnContext(ctx, "event stream not ready; the relay will retry", "error", err)
	}
	return b, nil
}

// EnsureStream creates or updates the event stream. The relay calls it
// again after a publish failure, so a stream lost with a NATS server's
// storage comes back.
func (b *Bus) EnsureStream(ctx context.Context) error {
	_, err := b.JS.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        b.Settings.Name,
		Description: "gpuaas platform events (CloudEvents 1.0, JSON); Nats-Msg-Id is the event id",
		Subjects:    []string{SubjectPrefix + ".>"},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		Duplicates:  b.Settings.DuplicateWindow,
		MaxAge:      b.Settings.MaxAge,
	})
	if err != nil {
		return fmt.Errorf("nats: ensure stream %s: %w", b.Settings.Name, err)
	}
	return nil
}

// Publish sends envelopes in order with Nats-Msg-Id = event id and waits for
// JetStream's acknowledgements. It returns how many leading envelopes were
// acknowledged: the relay marks exactly that prefix published and retries
// the rest (a later envelope acked after an earlier failure is simply sent
// again and deduplicated by id).
func (b *Bus) Publish(ctx context.Context, envs []Envelope) (int, error) {
	futures := make([]jetstream.PubAckFuture, 0, len(envs))
	var sendErr error
	for _, e := range envs {
		body, err := json.Marshal(e)
		if err != nil {
			return 0, err
		}
		msg := &nats.Msg{Subject: BusSubject(e.OrgID, e.ProjectID, e.Type), Data: body, Header: nats.Header{}}
		msg.Header.Set("Content-Type", "application/cloudevents+json")
		f, err := b.JS.PublishMsgAsync(msg, jetstream.WithMsgID(e.ID))
		if err != nil {
			sendErr = refusal(len(futures), err)
			break
		}
		futures = append(futures, f)
	}
	for i, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			if r := refusal(i, err); r != err {
				return i, r
			}
			return i, fmt.Errorf("nats: publish %s: %w", envs[i].ID, err)
		case <-ctx.Done():
			return i, ctx.Err()
		}
	}
	if sendErr != nil {
		var r *RefusedError
		if errors.As(sendErr, &r) {
			return len(futures), sendErr
		}
		return len(futures), fmt.Errorf("nats: publish: %w", sendErr)
	}
	return len(futures), nil
}

// RefusedError says the bus will never take envs[Index] (the events before
// it were acknowledged): retrying cannot help, so the relay parks it.
type RefusedError struct {
	Index  int
	Reason ParkReason // payload_too_large | invalid_subject | refused
	Err    error
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("the bus refuses event %d for good (%s): %v", e.Index, e.Reason, e.Err)
}

func (e *RefusedError) Unwrap() error { return e.Err }

// refusal wraps err as a RefusedError when it is permanent for that one
// message (its size or subject), and returns it unchanged when it is about
// the bus (an outage, a timeout), which a retry may get past.
func refusal(index int, err error) error {
	var reason ParkReason
	switch {
	case errors.Is(err, nats.ErrMaxPayload), errors.Is(err, jetstream.ErrStreamMessageExceedsMaximum):
		reason = ParkPayloadTooLarge
	case errors.Is(err, nats.ErrBadSubject):
		reason = ParkInvalidSubject
	default:
		return err
	}
	return &RefusedError{Index: index, Reason: reason, Err: err}
}

// Close closes the connection.
func (b *Bus) Close() error {
	b.NC.Close()
	return nil
}
