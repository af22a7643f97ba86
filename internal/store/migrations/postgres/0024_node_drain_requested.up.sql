-- A drain is an admin's request, kept apart from the node's liveness
-- state: a draining node that goes down comes back draining (not ready),
-- and a down node that is drained stays down until it beats, then comes
-- back draining with its lost allocations active again. Nodes draining
-- today keep their drain.
ALTER TABLE nodes ADD COLUMN drain_requested BOOLEAN NOT NULL DEFAULT FALSE;
UPDATE nodes SET drain_requested = TRUE WHERE state = 'draining';
