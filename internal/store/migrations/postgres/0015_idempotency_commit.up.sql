-- A keyed mutation now records, in its own transaction, that it committed
-- (committed_at) and what it changed (resource_type, resource_id), under
-- the claim that admitted it (claim_id). A retry after a crash between
-- commit and answer therefore never runs the change again, and a claim
-- whose transaction never committed can be taken over once it is stale.
ALTER TABLE idempotency_keys ADD COLUMN claim_id TEXT NOT NULL DEFAULT '';
ALTER TABLE idempotency_keys ADD COLUMN committed_at TIMESTAMPTZ;
ALTER TABLE idempotency_keys ADD COLUMN resource_type TEXT NOT NULL DEFAULT '';
ALTER TABLE idempotency_keys ADD COLUMN resource_id TEXT NOT NULL DEFAULT '';
