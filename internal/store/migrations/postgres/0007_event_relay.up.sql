-- The event relay: one lease row per relay name decides which replica
-- sequences and publishes the outbox; the holder renews it every pass and a
-- successor takes it over once it has expired (a crashed holder never
-- releases it). The sequencing transaction locks this row, so two relays can
-- never assign positions at the same time.
CREATE TABLE event_relay_leases (
    name       TEXT PRIMARY KEY,
    holder     TEXT NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL
);
-- Sequenced rows still waiting for the bus's acknowledgement, in order.
CREATE INDEX outbox_events_unpublished ON outbox_events (position) WHERE published_at IS NULL AND position IS NOT NULL;
