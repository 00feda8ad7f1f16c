-- The approval store's schema at version 1, as runbook/remedies/store.py made it at commit 65b2e92
-- (before versions were recorded): tests/store/test_migrations.py builds a store from it.
CREATE TABLE IF NOT EXISTS proposals (
    id          TEXT PRIMARY KEY,
    key         TEXT NOT NULL,          -- node + the verdict's proposal id: one pending per key
    kind        TEXT NOT NULL,
    remedy      TEXT NOT NULL,
    summary     TEXT NOT NULL,
    node        TEXT,
    root_cause  TEXT,
    playbook    TEXT,
    params      TEXT NOT NULL,          -- JSON: the proposal's params as rendered from facts
    plan        TEXT,                   -- JSON: playbook, inventory and extravars to run
    target      TEXT,                   -- JSON: how to reach the node again (re-check)
    runbook     TEXT,
    vars        TEXT,                   -- JSON: the runbook variables of the run
    evidence    TEXT NOT NULL,          -- JSON: the chain and first anomaly it rests on
    run_dir     TEXT,
    source      TEXT NOT NULL,          -- run | sweep
    state       TEXT NOT NULL CHECK (state IN
                  ('pending','running','succeeded','failed','denied','refused')),
    created_at  REAL NOT NULL,
    expires_at  REAL NOT NULL,
    decided_by  TEXT,
    decided_at  REAL,
    reason      TEXT,
    result      TEXT,                   -- JSON: the execution's outcome
    verification TEXT,                  -- JSON: the recovery check's outcome
    updated_at  REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS proposals_state ON proposals(state);
CREATE UNIQUE INDEX IF NOT EXISTS proposals_one_pending ON proposals(key) WHERE state = 'pending';
CREATE TABLE IF NOT EXISTS audit_head (
    id   INTEGER PRIMARY KEY CHECK (id = 1),
    seq  INTEGER NOT NULL,
    hash TEXT NOT NULL
);
