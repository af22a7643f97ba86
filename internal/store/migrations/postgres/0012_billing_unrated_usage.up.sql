-- Usage records rating set aside (issue 18): a record that cannot be rated
-- (its amount overflows, or rating it failed on its own) is parked here with
-- the reason, so one bad record never stops rating the others. A parked
-- record stays unrated and is shown to operators
-- (GET /api/v1/admin/billing/unrated-usage, gpuaas_billing_unrated_usage_records).
CREATE TABLE billing_parked_usage (
    usage_record_id TEXT PRIMARY KEY REFERENCES usage_records(id),
    org_id          TEXT NOT NULL,
    project_id      TEXT NOT NULL,
    reason          TEXT NOT NULL,
    detail          TEXT NOT NULL DEFAULT '',
    parked_at       TIMESTAMPTZ NOT NULL
);
