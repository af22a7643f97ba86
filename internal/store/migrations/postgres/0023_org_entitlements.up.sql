-- Org entitlements (issue 22): an org's admins entitle the whole org to an
-- app. A launch whose control_plane_scope is tenant makes an instance of
-- the org, so it is checked against this entitlement rather than a
-- project's; its policy overrides narrow such launches the same way.
CREATE TABLE app_org_entitlements (
    id               TEXT PRIMARY KEY,
    org_id           TEXT NOT NULL REFERENCES orgs(id),
    app_id           TEXT NOT NULL REFERENCES apps(id),
    app_slug         TEXT NOT NULL,
    enabled          BOOLEAN NOT NULL,
    policy_overrides JSONB NOT NULL,
    updated_by       TEXT NOT NULL,
    created_at       TIMESTAMPTZ NOT NULL,
    updated_at       TIMESTAMPTZ NOT NULL,
    UNIQUE (org_id, app_slug)
);
