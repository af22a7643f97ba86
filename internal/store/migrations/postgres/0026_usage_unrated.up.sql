-- The usage records the rater still has to look at: one row per record
-- with no charge yet. Every stored record joins it (the trigger below, in
-- the inserting statement, so no insert path can miss it); the store takes
-- a record off when it posts its charge. The rating pass (every minute, on
-- every replica) reads this queue rather than every usage record ever
-- stored, which only grows.
CREATE TABLE usage_unrated (
    usage_record_id TEXT PRIMARY KEY REFERENCES usage_records(id)
);
INSERT INTO usage_unrated (usage_record_id)
SELECT u.id FROM usage_records u
 WHERE NOT EXISTS (SELECT 1 FROM ledger_entries l WHERE l.usage_record_id = u.id AND l.entry_type = 'charge');

-- One INSERT … SELECT per statement (a batch of 500 records is one), from
-- the rows the statement stored (ON CONFLICT DO NOTHING skips are not in it).
CREATE FUNCTION usage_records_queue_unrated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO usage_unrated (usage_record_id) SELECT id FROM stored;
    RETURN NULL;
END $$;
CREATE TRIGGER usage_records_queue_unrated AFTER INSERT ON usage_records
    REFERENCING NEW TABLE AS stored FOR EACH STATEMENT EXECUTE FUNCTION usage_records_queue_unrated();
