-- Grants node by node: every holding names its node (a pool without node information is one node
-- named like the pool: old grants get that node; a pool that said its nodes before they counted has
-- its old grants' devices mapped to its nodes by the next write that works capacities out again),
-- and a share of a shared device says how many of the device's shares it holds. A grant's CPU and
-- memory on each node, and what a scheduler reports busy on a node beyond this layer's own
-- submitted grants.
ALTER TABLE holdings ADD COLUMN node TEXT;
ALTER TABLE holdings ADD COLUMN shares INTEGER CHECK (shares IS NULL OR shares >= 1);
UPDATE holdings SET node = pool;
CREATE INDEX holdings_node ON holdings(node);

CREATE TABLE node_grants (
    decision_id  TEXT NOT NULL REFERENCES allocations(decision_id),
    pool         TEXT NOT NULL REFERENCES pools(name),
    node         TEXT NOT NULL,
    position     INTEGER NOT NULL CHECK (position >= 0),   -- the node's place in the gang
    cpu_milli    INTEGER NOT NULL CHECK (cpu_milli >= 0),
    memory_mib   INTEGER NOT NULL CHECK (memory_mib >= 0),
    PRIMARY KEY (decision_id, node)
);
CREATE INDEX node_grants_pool ON node_grants(pool);

CREATE TABLE node_usage (
    pool         TEXT NOT NULL REFERENCES pools(name),
    node         TEXT NOT NULL,
    devices      INTEGER NOT NULL CHECK (devices >= 0),    -- whole devices busy beyond this layer's grants
    indices      TEXT NOT NULL,                            -- JSON: which of them, where the scheduler says
    shares       INTEGER NOT NULL CHECK (shares >= 0),     -- shares of shared devices busy
    cpu_milli    INTEGER CHECK (cpu_milli IS NULL OR cpu_milli >= 0),
    memory_mib   INTEGER CHECK (memory_mib IS NULL OR memory_mib >= 0),
    scheduler    TEXT NOT NULL,
    updated_at   TEXT NOT NULL,
    PRIMARY KEY (pool, node)
);
