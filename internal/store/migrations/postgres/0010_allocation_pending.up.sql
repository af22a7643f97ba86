-- Allocations are pending until their node confirms them (issue 11): the
-- count of a node's unconfirmed placements lets a plain heartbeat stay one
-- UPDATE when there is nothing to confirm.
ALTER TABLE nodes ADD COLUMN pending_allocations INTEGER NOT NULL DEFAULT 0;
