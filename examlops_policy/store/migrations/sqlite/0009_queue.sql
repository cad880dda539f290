-- Queueing, quotas and reconcile (docs/queue-design.md).
--
-- A workload whose pools are only full (not now) may wait: its decision is recorded with outcome
-- 'queued'. The outcome CHECK is loosened in place (SQLite's documented procedure for a change
-- that no stored row can violate: the table's own SQL text is edited, with writable_schema, and
-- the schema version bumped by the migration runner), so the columns later migrations added to
-- decisions stay as they are.
PRAGMA writable_schema = ON;
UPDATE sqlite_master SET sql = replace(sql, 'CHECK (outcome IN (''placed'', ''rejected'', ''blocked''))',
                                            'CHECK (outcome IN (''placed'', ''rejected'', ''blocked'', ''queued''))')
 WHERE type = 'table' AND name = 'decisions';
PRAGMA writable_schema = OFF;

-- A placement that admission made links to its queued record; the database itself refuses a
-- second placement of one queued record.
ALTER TABLE decisions ADD COLUMN queued_id TEXT REFERENCES decisions(id);
CREATE UNIQUE INDEX decisions_queued ON decisions(queued_id) WHERE queued_id IS NOT NULL;
-- The project (NULL: the unassigned project) and priority class a decision was made for: use per
-- project, and quota use per project and accelerator class, in SQL.
ALTER TABLE decisions ADD COLUMN project TEXT;
ALTER TABLE decisions ADD COLUMN priority TEXT;
UPDATE decisions SET project = json_extract(document, '$.workload.project') WHERE json_valid(document);
CREATE INDEX decisions_live_project ON decisions(project, accelerator) WHERE outcome = 'placed' AND released_at IS NULL;
CREATE INDEX decisions_placed_project ON decisions(project, created_ts) WHERE outcome = 'placed';
-- What the schedulers said of a placement's job (reconcile): when it really started and ended
-- (job_state holds the end state), when a node it holds went down, and the queued record a
-- planned preemption takes its grant for.
ALTER TABLE decisions ADD COLUMN job_started_at TEXT;
ALTER TABLE decisions ADD COLUMN job_ended_at TEXT;
ALTER TABLE decisions ADD COLUMN node_down_at TEXT;
ALTER TABLE decisions ADD COLUMN preempting_for TEXT;
CREATE INDEX decisions_jobs ON decisions(scheduler) WHERE job_id IS NOT NULL AND released_at IS NULL;
CREATE INDEX decisions_preempting ON decisions(preempting_for) WHERE preempting_for IS NOT NULL;
CREATE INDEX decisions_released ON decisions(released_ts) WHERE outcome = 'placed' AND released_ts IS NOT NULL;

-- The queue: one row per queued record, what it asks (for the order), what to do once admitted.
CREATE TABLE queue (
    id              TEXT PRIMARY KEY REFERENCES decisions(id),   -- the queued decision
    state           TEXT NOT NULL CHECK (state IN ('queued', 'admitted', 'cancelled', 'failed')),
    queued_at       TEXT NOT NULL,      -- its age counts from here (a requeued victim keeps its own)
    queued_ts       REAL NOT NULL,
    workload        TEXT NOT NULL,      -- the workload's name
    spec            TEXT NOT NULL,      -- the workload in full (JSON), placed again when admitted
    project         TEXT,               -- NULL: the unassigned project
    priority        TEXT,               -- NULL: the default class
    accelerator     TEXT NOT NULL,
    devices         REAL NOT NULL CHECK (devices > 0),
    lease_s         REAL,               -- the lease a placement made for it gets
    submission      TEXT,               -- JSON: how to submit it once placed (NULL: place only)
    admitted_by     TEXT REFERENCES decisions(id),
    ended_at        TEXT,               -- admitted, cancelled or failed at
    preempted_from  TEXT REFERENCES decisions(id),
    waits_for       TEXT,               -- JSON: reason code -> pools, when it was queued
    message         TEXT,               -- why it failed; a submission retry's last error
    attempts        INTEGER NOT NULL DEFAULT 0,   -- submissions tried after admission
    version         INTEGER NOT NULL DEFAULT 1
);
CREATE INDEX queue_waiting ON queue(queued_ts, id) WHERE state = 'queued';
CREATE INDEX queue_admitted ON queue(admitted_by) WHERE admitted_by IS NOT NULL;
CREATE INDEX queue_preempted ON queue(preempted_from) WHERE preempted_from IS NOT NULL;
