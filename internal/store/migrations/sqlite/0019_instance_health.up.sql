-- What a running workload reports about itself (issue 22): its health as
-- the app sees it (or degraded, when its heartbeats stop), its last
-- heartbeat, and whether it reported start_completed for its current
-- deployment. heartbeat_due_at is when the instance degrades unless another
-- heartbeat arrives; NULL when its version declares no heartbeat timeout.
-- These columns are written only by UpdateAppInstanceHealth, never by the
-- lifecycle driver's conditional update, so neither overwrites the other.
ALTER TABLE app_instances ADD COLUMN health TEXT NOT NULL DEFAULT 'unknown'
    CHECK (health IN ('unknown', 'healthy', 'unhealthy', 'degraded'));
ALTER TABLE app_instances ADD COLUMN health_reason TEXT NOT NULL DEFAULT '';
ALTER TABLE app_instances ADD COLUMN health_changed_at TEXT;
ALTER TABLE app_instances ADD COLUMN last_heartbeat_at TEXT;
ALTER TABLE app_instances ADD COLUMN heartbeat_timeout_seconds INTEGER NOT NULL DEFAULT 0;
ALTER TABLE app_instances ADD COLUMN heartbeat_due_at TEXT;
ALTER TABLE app_instances ADD COLUMN start_reported_seq INTEGER NOT NULL DEFAULT 0;
CREATE INDEX app_instances_heartbeat_due ON app_instances (heartbeat_due_at) WHERE heartbeat_due_at IS NOT NULL;

-- Timeline rows an app reported carry the durable dedupe key of the
-- CloudEvent (project, source, id): a repeat is recognised, not stored twice.
ALTER TABLE app_instance_events ADD COLUMN dedupe_key TEXT NOT NULL DEFAULT '';
CREATE UNIQUE INDEX app_instance_events_dedupe ON app_instance_events (dedupe_key) WHERE dedupe_key <> '';
