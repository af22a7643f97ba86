-- Sign-in attempts per account, each counted as a failure before its
-- password is checked and cleared by a success; shared by every replica
-- and kept across restarts (iam.LoginFailureStore): the per-account
-- lockout is the brute-force protection of every account, so one
-- replica's count must hold on the others. account is a keyed hash
-- (HMAC-SHA256 under a key derived from the master key) of the
-- normalised email, never the email:
-- the table is not a list of the addresses people tried. The last
-- failure is in microseconds since the epoch so that the one statement
-- that counts an attempt can tell, in the same arithmetic on both
-- dialects, whether the earlier ones are old news.
CREATE TABLE login_failures (
    account         TEXT PRIMARY KEY,
    failures        INTEGER NOT NULL,
    last_failure_us BIGINT NOT NULL
);
-- Lapsed rows are pruned oldest first.
CREATE INDEX login_failures_last ON login_failures (last_failure_us);
