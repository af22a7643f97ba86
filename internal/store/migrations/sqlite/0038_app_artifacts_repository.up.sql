-- A manifest delete in the registry asks which artifacts are registered in
-- the repository (the digest itself, or an image index that holds it);
-- without this index every delete read the whole artifact table.
CREATE INDEX app_artifacts_repository ON app_artifacts (repository, created_at);
