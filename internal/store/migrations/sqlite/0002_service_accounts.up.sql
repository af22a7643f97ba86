-- Service accounts: project-scoped machine identities, their public keys and
-- the assertion ids (jti) already exchanged, kept until the assertion expires.
CREATE TABLE service_accounts (
    id                 TEXT PRIMARY KEY,
    org_id             TEXT NOT NULL REFERENCES orgs(id),
    project_id         TEXT NOT NULL REFERENCES projects(id),
    slug               TEXT NOT NULL,
    name               TEXT NOT NULL,
    description        TEXT NOT NULL DEFAULT '',
    status             TEXT NOT NULL CHECK (status IN ('active', 'disabled')),
    tokens_valid_after TEXT NOT NULL,
    created_at         TEXT NOT NULL,
    updated_at         TEXT NOT NULL,
    UNIQUE (project_id, slug)
);

-- Public keys only: the private half is returned once and never stored.
-- expires_at NULL means valid until rotated out; a past expires_at means revoked.
CREATE TABLE service_account_keys (
    id                 TEXT PRIMARY KEY,
    service_account_id TEXT NOT NULL REFERENCES service_accounts(id) ON DELETE CASCADE,
    algorithm          TEXT NOT NULL CHECK (algorithm IN ('EdDSA', 'ES256')),
    public_key         TEXT NOT NULL,
    created_at         TEXT NOT NULL,
    expires_at         TEXT
);
CREATE INDEX service_account_keys_account ON service_account_keys (service_account_id, id);

CREATE TABLE service_account_assertions (
    service_account_id TEXT NOT NULL,
    jti                TEXT NOT NULL,
    expires_at         TEXT NOT NULL,
    PRIMARY KEY (service_account_id, jti)
);
CREATE INDEX service_account_assertions_expiry ON service_account_assertions (expires_at);
