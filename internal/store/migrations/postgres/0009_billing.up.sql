-- Metering and billing (issue 13): usage records from every source, a
-- versioned price table, an append-only ledger, and per-project budgets.
-- Money is integer micro-units of the currency; there are no floats.

-- Prices are versioned and effective-dated: a new price for the same sku or
-- meter is a new row with the next version, never an edit. The price of a
-- usage record is the newest version whose effective_from is at or before
-- the record's start_time. unit_price_micros is charged per per_quantity
-- units (3600 gpu_seconds for a price per GPU-hour).
CREATE TABLE billing_prices (
    id                TEXT PRIMARY KEY,
    usage_source      TEXT NOT NULL CHECK (usage_source IN ('allocation', 'app_runtime')),
    sku               TEXT NOT NULL DEFAULT '',
    meter             TEXT NOT NULL DEFAULT '',
    usage_unit        TEXT NOT NULL,
    version           INTEGER NOT NULL,
    unit_price_micros BIGINT NOT NULL CHECK (unit_price_micros >= 0),
    per_quantity      BIGINT NOT NULL CHECK (per_quantity > 0),
    currency          TEXT NOT NULL,
    effective_from    TIMESTAMPTZ NOT NULL,
    note              TEXT NOT NULL DEFAULT '',
    created_by        TEXT NOT NULL,
    created_at        TIMESTAMPTZ NOT NULL,
    UNIQUE (usage_source, sku, meter, version)
);
CREATE INDEX billing_prices_lookup ON billing_prices (usage_source, sku, meter, effective_from);

-- One shape for every source. dedupe_key is the durable dedupe: for app
-- events the (source, id) pair within the project, for platform-produced
-- records the interval slice they cover. A second insert of the same key is
-- a duplicate and changes nothing.
CREATE TABLE usage_records (
    id                  TEXT PRIMARY KEY,
    dedupe_key          TEXT NOT NULL UNIQUE,
    org_id              TEXT NOT NULL,
    project_id          TEXT NOT NULL,
    app_instance_id     TEXT NOT NULL DEFAULT '',
    allocation_id       TEXT NOT NULL DEFAULT '',
    app_slug            TEXT NOT NULL DEFAULT '',
    operating_mode      TEXT NOT NULL DEFAULT '',
    control_plane_scope TEXT NOT NULL DEFAULT '',
    runtime_backend     TEXT NOT NULL DEFAULT '',
    correlation_id      TEXT NOT NULL DEFAULT '',
    usage_source        TEXT NOT NULL CHECK (usage_source IN ('allocation', 'app_runtime')),
    usage_unit          TEXT NOT NULL,
    quantity            BIGINT NOT NULL CHECK (quantity >= 0),
    sku                 TEXT NOT NULL DEFAULT '',
    meter               TEXT NOT NULL DEFAULT '',
    start_time          TIMESTAMPTZ NOT NULL,
    end_time            TIMESTAMPTZ NOT NULL,
    event_source        TEXT NOT NULL DEFAULT '',
    event_id            TEXT NOT NULL DEFAULT '',
    recorded_at         TIMESTAMPTZ NOT NULL
);
CREATE INDEX usage_records_project ON usage_records (project_id, start_time);
CREATE INDEX usage_records_org ON usage_records (org_id, start_time);
CREATE INDEX usage_records_instance ON usage_records (app_instance_id, start_time);

-- The ledger. A charge rates one usage record (at most one charge per
-- record, so rating twice cannot charge twice); a correction compensates an
-- earlier entry and names it. Balances are sums of entries, never stored.
CREATE TABLE ledger_entries (
    id                TEXT PRIMARY KEY,
    org_id            TEXT NOT NULL,
    project_id        TEXT NOT NULL,
    entry_type        TEXT NOT NULL CHECK (entry_type IN ('charge', 'correction')),
    usage_record_id   TEXT REFERENCES usage_records(id),
    corrects_entry_id TEXT REFERENCES ledger_entries(id),
    app_instance_id   TEXT NOT NULL DEFAULT '',
    usage_source      TEXT NOT NULL,
    usage_unit        TEXT NOT NULL DEFAULT '',
    sku               TEXT NOT NULL DEFAULT '',
    meter             TEXT NOT NULL DEFAULT '',
    quantity          BIGINT NOT NULL DEFAULT 0,
    price_id          TEXT REFERENCES billing_prices(id),
    unit_price_micros BIGINT NOT NULL DEFAULT 0,
    per_quantity      BIGINT NOT NULL DEFAULT 1,
    amount_micros     BIGINT NOT NULL,
    currency          TEXT NOT NULL,
    reason            TEXT NOT NULL DEFAULT '',
    usage_time        TIMESTAMPTZ NOT NULL,
    created_by        TEXT NOT NULL,
    created_at        TIMESTAMPTZ NOT NULL,
    CHECK ((entry_type = 'charge' AND usage_record_id IS NOT NULL) OR (entry_type = 'correction' AND corrects_entry_id IS NOT NULL))
);
CREATE UNIQUE INDEX ledger_entries_one_charge ON ledger_entries (usage_record_id) WHERE entry_type = 'charge';
CREATE INDEX ledger_entries_project ON ledger_entries (project_id, usage_time);
CREATE INDEX ledger_entries_org ON ledger_entries (org_id, usage_time);
CREATE INDEX ledger_entries_corrects ON ledger_entries (corrects_entry_id);

-- Append-only, enforced by the database itself: no code path, migration or
-- hand-typed statement can rewrite money or usage after the fact.
CREATE FUNCTION billing_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is append-only: % refused; post a compensating entry instead', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'restrict_violation';
END
$$;
CREATE TRIGGER ledger_entries_append_only BEFORE UPDATE OR DELETE ON ledger_entries
    FOR EACH ROW EXECUTE FUNCTION billing_append_only();
CREATE TRIGGER ledger_entries_no_truncate BEFORE TRUNCATE ON ledger_entries
    FOR EACH STATEMENT EXECUTE FUNCTION billing_append_only();
CREATE TRIGGER usage_records_append_only BEFORE UPDATE OR DELETE ON usage_records
    FOR EACH ROW EXECUTE FUNCTION billing_append_only();
CREATE TRIGGER billing_prices_append_only BEFORE UPDATE OR DELETE ON billing_prices
    FOR EACH ROW EXECUTE FUNCTION billing_append_only();

-- Per-project cost controls checked at launch time. NULL means no limit.
CREATE TABLE billing_budgets (
    project_id             TEXT PRIMARY KEY REFERENCES projects(id),
    org_id                 TEXT NOT NULL,
    gpu_quota              INTEGER CHECK (gpu_quota >= 0),
    spend_limit_micros     BIGINT CHECK (spend_limit_micros >= 0),
    currency               TEXT NOT NULL,
    period                 TEXT NOT NULL CHECK (period IN ('day', 'month')),
    soft_threshold_percent INTEGER NOT NULL CHECK (soft_threshold_percent BETWEEN 1 AND 100),
    updated_by             TEXT NOT NULL,
    created_at             TIMESTAMPTZ NOT NULL,
    updated_at             TIMESTAMPTZ NOT NULL
);

-- A threshold crossed once per project, period and level: the row is what
-- makes the threshold event fire once, however many workers rate.
CREATE TABLE billing_threshold_crossings (
    project_id   TEXT NOT NULL,
    period_start TIMESTAMPTZ NOT NULL,
    level        TEXT NOT NULL CHECK (level IN ('soft', 'limit')),
    crossed_at   TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (project_id, period_start, level)
);

-- How far the metering worker has turned each interval into usage records.
-- closed_at is set once the interval's last slice is recorded.
CREATE TABLE billing_metered_intervals (
    kind          TEXT NOT NULL CHECK (kind IN ('allocation', 'instance')),
    interval_id   TEXT NOT NULL,
    metered_until TIMESTAMPTZ NOT NULL,
    closed_at     TIMESTAMPTZ,
    PRIMARY KEY (kind, interval_id)
);
