-- Transactional outbox: every event is written in its mutation's transaction.
-- position is NULL until the relay sequences the row; once set it is the one
-- order every consumer sees (commit-visible order, gap-free per relay pass).
CREATE TABLE outbox_events (
    id             TEXT PRIMARY KEY,
    position       BIGINT UNIQUE,
    source         TEXT NOT NULL,
    type           TEXT NOT NULL,
    subject        TEXT NOT NULL DEFAULT '',
    occurred_at    TIMESTAMPTZ NOT NULL,
    org_id         TEXT NOT NULL DEFAULT '',
    project_id     TEXT NOT NULL DEFAULT '',
    actor          TEXT NOT NULL DEFAULT '',
    correlation_id TEXT NOT NULL DEFAULT '',
    data           JSONB NOT NULL,
    published_at   TIMESTAMPTZ
);
CREATE INDEX outbox_events_unsequenced ON outbox_events (id) WHERE position IS NULL;
CREATE INDEX outbox_events_project ON outbox_events (project_id, position);
CREATE INDEX outbox_events_org ON outbox_events (org_id, position);
