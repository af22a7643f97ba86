-- The role the server should run as in production: gpuaas_app (NOLOGIN;
-- grant it to the server's login role). It reads and writes rows but owns
-- nothing, so it cannot ALTER TABLE … DISABLE TRIGGER, drop a table or
-- change the schema, and on the append-only billing tables it may only
-- read and insert. Migrations run as the owner (`gpuaas migrate`), the
-- server with --auto-migrate=false as a member of gpuaas_app
-- (docs/operations.md). A migrating role without CREATEROLE skips the
-- role's creation with a notice; an operator can then run this file's
-- statements as a superuser.
DO $$
BEGIN
    BEGIN
        CREATE ROLE gpuaas_app NOLOGIN;
    EXCEPTION
        WHEN duplicate_object OR unique_violation THEN NULL; -- made by another schema's migration
        WHEN insufficient_privilege THEN
            RAISE NOTICE 'gpuaas_app not created: the migrating role lacks CREATEROLE';
            RETURN;
    END;
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO gpuaas_app', current_schema());
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA %I TO gpuaas_app', current_schema());
    EXECUTE format('GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA %I TO gpuaas_app', current_schema());
    -- Tables later migrations create get the same rights.
    EXECUTE format('ALTER DEFAULT PRIVILEGES IN SCHEMA %I GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO gpuaas_app', current_schema());
    EXECUTE format('ALTER DEFAULT PRIVILEGES IN SCHEMA %I GRANT USAGE, SELECT ON SEQUENCES TO gpuaas_app', current_schema());
    -- Money and usage are append-only for the server, not only by trigger.
    EXECUTE format('REVOKE UPDATE, DELETE, TRUNCATE ON %I.ledger_entries, %I.usage_records, %I.billing_prices FROM gpuaas_app',
        current_schema(), current_schema(), current_schema());
END
$$;
