-- A replayed answer carries the headers of the first one that a client acts
-- on (Location: the operation to poll; ETag: what an If-Match is built
-- from), as a JSON object of the edge's allow-listed names. Records from
-- before carry NULL and replay without them, as they did.
ALTER TABLE idempotency_keys ADD COLUMN response_headers TEXT;
