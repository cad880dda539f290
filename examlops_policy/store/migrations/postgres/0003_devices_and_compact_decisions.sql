-- Capacity per device, compact decisions, idempotent requests and leases: the same tables and
-- columns as migrations/sqlite/0003_devices_and_compact_decisions.sql, in PostgreSQL types.
-- 0002 stored held_outside as 4-byte REAL (8/7 busy devices read back as 6.857142806 free); it is
-- double precision, as everywhere else.
ALTER TABLE pools ALTER COLUMN held_outside TYPE DOUBLE PRECISION;

CREATE TABLE state (
    id             INTEGER PRIMARY KEY CHECK (id = 1),
    version        BIGINT NOT NULL,
    fleet_version  BIGINT NOT NULL,
    layout         TEXT
);
INSERT INTO state (id, version, fleet_version, layout) VALUES (1, 1, 1, NULL);

ALTER TABLE pools ADD COLUMN version BIGINT NOT NULL DEFAULT 0;
ALTER TABLE pools ADD COLUMN free DOUBLE PRECISION;
ALTER TABLE pools ADD COLUMN capacity TEXT;

CREATE TABLE holdings (
    decision_id  TEXT COLLATE "C" NOT NULL REFERENCES allocations(decision_id),
    pool         TEXT COLLATE "C" NOT NULL REFERENCES pools(name),
    device       INTEGER NOT NULL CHECK (device >= 0),
    profile      TEXT,
    start        INTEGER,
    units        INTEGER,
    share        DOUBLE PRECISION NOT NULL CHECK (share > 0)
);
CREATE INDEX holdings_pool ON holdings(pool);
CREATE INDEX holdings_decision ON holdings(decision_id);

CREATE TABLE fleets (
    revision    TEXT COLLATE "C" PRIMARY KEY,
    document    TEXT NOT NULL,
    created_at  TEXT COLLATE "C" NOT NULL
);

CREATE TABLE verdict_sets (
    key         TEXT COLLATE "C" PRIMARY KEY,
    document    TEXT NOT NULL,
    created_at  TEXT COLLATE "C" NOT NULL
);

ALTER TABLE decisions ADD COLUMN record_digest TEXT;
ALTER TABLE decisions ADD COLUMN fleet_revision TEXT;
ALTER TABLE decisions ADD COLUMN verdict_set TEXT;
ALTER TABLE decisions ADD COLUMN request_id TEXT;
ALTER TABLE decisions ADD COLUMN lease_expires_at TEXT COLLATE "C";
ALTER TABLE decisions ADD COLUMN created_ts DOUBLE PRECISION;
ALTER TABLE decisions ADD COLUMN released_ts DOUBLE PRECISION;
ALTER TABLE decisions ADD COLUMN residency TEXT;
ALTER TABLE decisions ADD COLUMN verdicts TEXT;
UPDATE decisions SET created_ts = EXTRACT(EPOCH FROM created_at::timestamptz),
                     released_ts = EXTRACT(EPOCH FROM released_at::timestamptz);
CREATE UNIQUE INDEX decisions_request ON decisions(request_id) WHERE request_id IS NOT NULL;
CREATE INDEX decisions_lease ON decisions(lease_expires_at) WHERE lease_expires_at IS NOT NULL AND released_at IS NULL;
CREATE INDEX decisions_outcome ON decisions(outcome, created_ts);
