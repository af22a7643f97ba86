-- PostgreSQL creates the gpuaas_app role here (the role the server runs as,
-- which owns nothing and cannot disable the ledger's triggers). SQLite has
-- no roles: the file's owner is the only one; this keeps version numbers in
-- step.
SELECT 1;
