-- Bearer tokens of the placement service (issue 33): who may place and read for which project.
-- Only a digest of each token is kept (SHA-256 of the whole token, which carries 256 random bits);
-- the token itself is shown once, when it is made. A revoked or expired token stays as a row, so
-- that what was done with it can still be told.
CREATE TABLE api_tokens (
    id TEXT PRIMARY KEY,
    project TEXT NOT NULL,
    scopes TEXT NOT NULL,
    digest TEXT NOT NULL,
    created_at TEXT NOT NULL,
    expires_at TEXT,
    revoked_at TEXT
);
