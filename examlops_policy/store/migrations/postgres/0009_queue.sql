-- Queueing, quotas and reconcile: the same tables and columns as migrations/sqlite/0009_queue.sql,
-- in PostgreSQL types.
ALTER TABLE decisions DROP CONSTRAINT decisions_outcome_check;
ALTER TABLE decisions ADD CONSTRAINT decisions_outcome_check CHECK (outcome IN ('placed', 'rejected', 'blocked', 'queued'));

ALTER TABLE decisions ADD COLUMN queued_id TEXT COLLATE "C" REFERENCES decisions(id);
CREATE UNIQUE INDEX decisions_queued ON decisions(queued_id) WHERE queued_id IS NOT NULL;
ALTER TABLE decisions ADD COLUMN project TEXT COLLATE "C";
ALTER TABLE decisions ADD COLUMN priority TEXT;
UPDATE decisions SET project = (document::jsonb -> 'workload' ->> 'project');
CREATE INDEX decisions_live_project ON decisions(project, accelerator) WHERE outcome = 'placed' AND released_at IS NULL;
CREATE INDEX decisions_placed_project ON decisions(project, created_ts) WHERE outcome = 'placed';
ALTER TABLE decisions ADD COLUMN job_started_at TEXT COLLATE "C";
ALTER TABLE decisions ADD COLUMN job_ended_at TEXT COLLATE "C";
ALTER TABLE decisions ADD COLUMN node_down_at TEXT COLLATE "C";
ALTER TABLE decisions ADD COLUMN preempting_for TEXT COLLATE "C";
CREATE INDEX decisions_jobs ON decisions(scheduler) WHERE job_id IS NOT NULL AND released_at IS NULL;
CREATE INDEX decisions_preempting ON decisions(preempting_for) WHERE preempting_for IS NOT NULL;
CREATE INDEX decisions_released ON decisions(released_ts) WHERE outcome = 'placed' AND released_ts IS NOT NULL;

CREATE TABLE queue (
    id              TEXT COLLATE "C" PRIMARY KEY REFERENCES decisions(id),
    state           TEXT NOT NULL CHECK (state IN ('queued', 'admitted', 'cancelled', 'failed')),
    queued_at       TEXT COLLATE "C" NOT NULL,
    queued_ts       DOUBLE PRECISION NOT NULL,
    workload        TEXT NOT NULL,
    spec            TEXT NOT NULL,
    project         TEXT COLLATE "C",
    priority        TEXT,
    accelerator     TEXT NOT NULL,
    devices         DOUBLE PRECISION NOT NULL CHECK (devices > 0),
    lease_s         DOUBLE PRECISION,
    submission      TEXT,
    admitted_by     TEXT COLLATE "C" REFERENCES decisions(id),
    ended_at        TEXT COLLATE "C",
    preempted_from  TEXT COLLATE "C" REFERENCES decisions(id),
    waits_for       TEXT,
    message         TEXT,
    attempts        INTEGER NOT NULL DEFAULT 0,
    version         BIGINT NOT NULL DEFAULT 1
);
CREATE INDEX queue_waiting ON queue(queued_ts, id) WHERE state = 'queued';
CREATE INDEX queue_admitted ON queue(admitted_by) WHERE admitted_by IS NOT NULL;
CREATE INDEX queue_preempted ON queue(preempted_from) WHERE preempted_from IS NOT NULL;
