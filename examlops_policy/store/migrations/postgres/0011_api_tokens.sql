-- Bearer tokens of the placement service: the same table as migrations/sqlite/0011_api_tokens.sql.
CREATE TABLE api_tokens (
    id TEXT COLLATE "C" PRIMARY KEY,
    project TEXT NOT NULL,
    scopes TEXT NOT NULL,
    digest TEXT NOT NULL,
    created_at TEXT NOT NULL,
    expires_at TEXT,
    revoked_at TEXT
);
