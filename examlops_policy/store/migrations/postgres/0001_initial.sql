-- Initial schema: pools, capacity held by decisions, decisions, burst attempts, the audit chain.
-- The same tables, columns and constraints as migrations/sqlite/0001_initial.sql, in PostgreSQL
-- types. Timestamps stay ISO-8601 text so both stores return identical records; ids and times
-- use the C collation so they sort (and prefix-match) exactly as in SQLite.
CREATE TABLE pools (
    name        TEXT COLLATE "C" PRIMARY KEY,
    spec        TEXT NOT NULL,             -- the validated pool, as canonical JSON
    count       INTEGER NOT NULL CHECK (count >= 1),
    created_at  TEXT COLLATE "C" NOT NULL,
    updated_at  TEXT COLLATE "C" NOT NULL
);

CREATE TABLE decisions (
    id                TEXT COLLATE "C" PRIMARY KEY,
    created_at        TEXT COLLATE "C" NOT NULL,
    workload          TEXT NOT NULL,
    outcome           TEXT NOT NULL CHECK (outcome IN ('placed', 'rejected', 'blocked')),
    pool              TEXT COLLATE "C" REFERENCES pools(name),
    accelerator       TEXT,
    model             TEXT,
    target            TEXT,
    region            TEXT,
    fallback          INTEGER,
    fraction_honored  INTEGER,
    devices           DOUBLE PRECISION,
    cost_per_hour     DOUBLE PRECISION,
    carbon_factor     DOUBLE PRECISION,
    note              TEXT,
    input_digest      TEXT NOT NULL,
    policy_revision   TEXT NOT NULL,
    opa_version       TEXT NOT NULL,
    released_at       TEXT COLLATE "C",
    job_id            TEXT,
    document          TEXT NOT NULL           -- the whole decision with every pool's verdict
);
CREATE INDEX decisions_created ON decisions(created_at);

CREATE TABLE allocations (
    decision_id  TEXT COLLATE "C" PRIMARY KEY REFERENCES decisions(id),
    pool         TEXT COLLATE "C" NOT NULL REFERENCES pools(name),
    devices      DOUBLE PRECISION NOT NULL CHECK (devices > 0),
    created_at   TEXT COLLATE "C" NOT NULL,
    released_at  TEXT COLLATE "C"
);
CREATE INDEX allocations_live ON allocations(pool) WHERE released_at IS NULL;

CREATE TABLE burst_events (
    id           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    created_at   TEXT COLLATE "C" NOT NULL,
    decision_id  TEXT COLLATE "C" NOT NULL REFERENCES decisions(id),
    workload     TEXT NOT NULL,
    residency    TEXT NOT NULL,
    pool         TEXT,
    region       TEXT,
    verdict      TEXT NOT NULL CHECK (verdict IN ('allowed', 'blocked', 'unavailable')),
    reason_code  TEXT,
    reason       TEXT
);

CREATE TABLE audit_log (
    seq         BIGINT PRIMARY KEY CHECK (seq >= 1),
    prev_hash   BYTEA NOT NULL UNIQUE,          -- a racing writer fails instead of forking the chain
    entry_hash  BYTEA NOT NULL UNIQUE,
    entry       BYTEA NOT NULL,                 -- the exact canonical bytes that were hashed
    source      TEXT NOT NULL,
    kind        TEXT NOT NULL,
    created_at  TEXT COLLATE "C" NOT NULL
);

-- A guard against accidents, not a security boundary: the chain and checkpoints are.
CREATE FUNCTION audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_log is append-only';
END
$$;
CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_log_append_only();
CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_log_append_only();
CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION audit_log_append_only();

-- The application role (here the owner, which runs the migrations) appends and reads the log,
-- nothing else; an owner could grant itself more back, so this too guards against accidents.
REVOKE ALL ON audit_log FROM PUBLIC;
REVOKE ALL ON audit_log FROM CURRENT_USER;
GRANT SELECT, INSERT ON audit_log TO CURRENT_USER;
