-- Initial schema: pools, capacity held by decisions, decisions, burst attempts, the audit chain.
CREATE TABLE pools (
    name        TEXT PRIMARY KEY,
    spec        TEXT NOT NULL,             -- the validated pool, as canonical JSON
    count       INTEGER NOT NULL CHECK (count >= 1),
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL
);

CREATE TABLE decisions (
    id                TEXT PRIMARY KEY,
    created_at        TEXT NOT NULL,
    workload          TEXT NOT NULL,
    outcome           TEXT NOT NULL CHECK (outcome IN ('placed', 'rejected', 'blocked')),
    pool              TEXT REFERENCES pools(name),
    accelerator       TEXT,
    model             TEXT,
    target            TEXT,
    region            TEXT,
    fallback          INTEGER,
    fraction_honored  INTEGER,
    devices           REAL,
    cost_per_hour     REAL,
    carbon_factor     REAL,
    note              TEXT,
    input_digest      TEXT NOT NULL,
    policy_revision   TEXT NOT NULL,
    opa_version       TEXT NOT NULL,
    released_at       TEXT,
    job_id            TEXT,
    document          TEXT NOT NULL           -- the whole decision with every pool's verdict
);
CREATE INDEX decisions_created ON decisions(created_at);

CREATE TABLE allocations (
    decision_id  TEXT PRIMARY KEY REFERENCES decisions(id),
    pool         TEXT NOT NULL REFERENCES pools(name),
    devices      REAL NOT NULL CHECK (devices > 0),
    created_at   TEXT NOT NULL,
    released_at  TEXT
);
CREATE INDEX allocations_live ON allocations(pool) WHERE released_at IS NULL;

CREATE TABLE burst_events (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    created_at   TEXT NOT NULL,
    decision_id  TEXT NOT NULL REFERENCES decisions(id),
    workload     TEXT NOT NULL,
    residency    TEXT NOT NULL,
    pool         TEXT,
    region       TEXT,
    verdict      TEXT NOT NULL CHECK (verdict IN ('allowed', 'blocked', 'unavailable')),
    reason_code  TEXT,
    reason       TEXT
);

CREATE TABLE audit_log (
    seq         INTEGER PRIMARY KEY,
    prev_hash   BLOB NOT NULL UNIQUE,          -- a racing writer fails instead of forking the chain
    entry_hash  BLOB NOT NULL UNIQUE,
    entry       BLOB NOT NULL,                 -- the exact canonical bytes that were hashed
    source      TEXT NOT NULL,
    kind        TEXT NOT NULL,
    created_at  TEXT NOT NULL
);

-- A guard against accidents, not a security boundary: the chain and checkpoints are.
CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log
BEGIN SELECT RAISE(ABORT, 'audit_log is append-only'); END;
CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log
BEGIN SELECT RAISE(ABORT, 'audit_log is append-only'); END;
