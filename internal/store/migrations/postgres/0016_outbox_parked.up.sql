-- An event the bus refuses for good (too large, an invalid subject) is
-- parked: marked handled with its reason, so the relay goes on with the
-- events behind it and operators can see it (GET /api/v1/admin/events/parked).
ALTER TABLE outbox_events ADD COLUMN parked_reason TEXT NOT NULL DEFAULT '';
CREATE INDEX outbox_events_parked ON outbox_events (position) WHERE parked_reason <> '';
