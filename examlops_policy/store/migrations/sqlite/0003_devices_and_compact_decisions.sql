-- Capacity per device: every live grant holds concrete devices (and, for a slice, its profile and
-- start); each pool keeps a summary of what is still placeable. Compact decisions: a decision
-- stores its workload, the fleet and verdict set it was judged on (each stored once, content-
-- addressed), the capacity it saw and its outcome; explanations are rebuilt from those. Old rows
-- keep their full documents. Idempotent requests and leases.
CREATE TABLE state (
    id             INTEGER PRIMARY KEY CHECK (id = 1),
    version        INTEGER NOT NULL,   -- bumped by every write that changes pools or what they hold
    fleet_version  INTEGER NOT NULL,   -- bumped by every write that changes a pool's spec
    layout         TEXT                -- digest of the partitioning tables the summaries were made with
);
INSERT INTO state (id, version, fleet_version, layout) VALUES (1, 1, 1, NULL);

ALTER TABLE pools ADD COLUMN version INTEGER NOT NULL DEFAULT 0;   -- the state version of its last change
ALTER TABLE pools ADD COLUMN free REAL;                            -- devices free (shares summed), for people
ALTER TABLE pools ADD COLUMN capacity TEXT;                        -- what is placeable (JSON), see packing.py

CREATE TABLE holdings (
    decision_id  TEXT NOT NULL REFERENCES allocations(decision_id),
    pool         TEXT NOT NULL REFERENCES pools(name),
    device       INTEGER NOT NULL CHECK (device >= 0),
    profile      TEXT,                  -- NULL: the whole device
    start        INTEGER,               -- MIG memory slice the instance starts at; AMD partition index
    units        INTEGER,
    share        REAL NOT NULL CHECK (share > 0)
);
CREATE INDEX holdings_pool ON holdings(pool);
CREATE INDEX holdings_decision ON holdings(decision_id);

CREATE TABLE fleets (
    revision    TEXT PRIMARY KEY,       -- "fleet:" + SHA-256 of the document
    document    TEXT NOT NULL,
    created_at  TEXT NOT NULL
);

CREATE TABLE verdict_sets (
    key         TEXT PRIMARY KEY,       -- "verdicts:" + SHA-256 of the document
    document    TEXT NOT NULL,
    created_at  TEXT NOT NULL
);

ALTER TABLE decisions ADD COLUMN record_digest TEXT;      -- SHA-256 of a compact document, also in its audit entry
ALTER TABLE decisions ADD COLUMN fleet_revision TEXT;
ALTER TABLE decisions ADD COLUMN verdict_set TEXT;
ALTER TABLE decisions ADD COLUMN request_id TEXT;         -- the caller's idempotency key
ALTER TABLE decisions ADD COLUMN lease_expires_at TEXT;   -- released by the next write after this, unless submitted
ALTER TABLE decisions ADD COLUMN created_ts REAL;         -- epoch seconds, for aggregates in SQL
ALTER TABLE decisions ADD COLUMN released_ts REAL;
ALTER TABLE decisions ADD COLUMN residency TEXT;
ALTER TABLE decisions ADD COLUMN verdicts TEXT;           -- "fresh" or "reused"
UPDATE decisions SET created_ts = (julianday(created_at) - 2440587.5) * 86400.0,
                     released_ts = CASE WHEN released_at IS NULL THEN NULL
                                        ELSE (julianday(released_at) - 2440587.5) * 86400.0 END;
CREATE UNIQUE INDEX decisions_request ON decisions(request_id) WHERE request_id IS NOT NULL;
CREATE INDEX decisions_lease ON decisions(lease_expires_at) WHERE lease_expires_at IS NOT NULL AND released_at IS NULL;
CREATE INDEX decisions_outcome ON decisions(outcome, created_ts);
