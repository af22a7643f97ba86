-- A keyed request records the fingerprint of its caller's role bindings
-- (grants_hash). Its stored outcome is replayed only to a caller whose
-- bindings are unchanged: a member removed since, or one given a role the
-- first request lacked, gets 409 idempotency_key_grants_changed instead of
-- an answer made under other rights. Records from before carry '' and are
-- not replayed (they expire within a day).
ALTER TABLE idempotency_keys ADD COLUMN grants_hash TEXT NOT NULL DEFAULT '';
