-- Browser sessions of the web console. The cookie holds a random id; only
-- its SHA-256 is stored, so a database read never yields a usable cookie.
-- Sign-out stamps ended_at: the row stays for the audit trail, the cookie
-- is dead.
CREATE TABLE console_sessions (
    id_hash      TEXT PRIMARY KEY,
    user_id      TEXT NOT NULL REFERENCES users (id),
    csrf_token   TEXT NOT NULL,
    project_id   TEXT NOT NULL DEFAULT '',
    created_at   TEXT NOT NULL,
    last_seen_at TEXT NOT NULL,
    expires_at   TEXT NOT NULL,
    ended_at     TEXT
);
CREATE INDEX console_sessions_user ON console_sessions (user_id);

-- One-time codes the console hands a browser to open an instance's UI
-- through the gateway: bound to the person, the instance and its UI port,
-- short-lived, redeemable once (used_at).
CREATE TABLE ui_open_codes (
    code_hash   TEXT PRIMARY KEY,
    user_id     TEXT NOT NULL,
    org_id      TEXT NOT NULL,
    project_id  TEXT NOT NULL,
    instance_id TEXT NOT NULL,
    port        INTEGER NOT NULL,
    created_at  TEXT NOT NULL,
    expires_at  TEXT NOT NULL,
    used_at     TEXT
);
CREATE INDEX ui_open_codes_expiry ON ui_open_codes (expires_at);
