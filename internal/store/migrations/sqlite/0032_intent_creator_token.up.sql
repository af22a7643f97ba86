-- The access token a publish or pull intent was created with: its issue
-- time (microseconds, as iam.AccessClaims.CutBy compares it) and, for a
-- service account, the key it was minted with. The registry credentials of
-- the intent are checked on every /v2/token request as that token would be
-- on every API request, so a revoked key or a disable (tokens_valid_after)
-- ends them too, even once the account is enabled again. Rows written
-- before these columns read 0 and '' and are checked by their creator
-- alone, as before.
ALTER TABLE artifact_intents ADD COLUMN creator_token_issued_us INTEGER NOT NULL DEFAULT 0;
ALTER TABLE artifact_intents ADD COLUMN creator_key_id TEXT NOT NULL DEFAULT '';
