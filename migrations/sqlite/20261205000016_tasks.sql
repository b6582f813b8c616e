-- The task queue of background work (see icegate_catalog::jobs): one row per task, claimed by
-- a worker under a lease it renews; a task whose lease expired is claimed again.
CREATE TABLE tasks (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    warehouse_id TEXT,
    tabular_id TEXT,
    -- At most one queued or running task per key (recurring jobs, one task per table and job).
    dedupe_key TEXT,
    state TEXT NOT NULL CHECK (state IN ('queued', 'running', 'done', 'failed', 'cancelled')),
    attempts BIGINT NOT NULL DEFAULT 0,
    max_attempts BIGINT NOT NULL,
    not_before BIGINT NOT NULL,
    lease_owner TEXT,
    lease_expires_at BIGINT,
    heartbeat_at BIGINT,
    progress_done BIGINT NOT NULL DEFAULT 0,
    progress_total BIGINT,
    progress_bytes BIGINT NOT NULL DEFAULT 0,
    checkpoint TEXT,
    params TEXT NOT NULL,
    result TEXT,
    last_error TEXT,
    reason TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    finished_at BIGINT
);

CREATE UNIQUE INDEX tasks_active_dedupe ON tasks (dedupe_key)
    WHERE dedupe_key IS NOT NULL AND state IN ('queued', 'running');
CREATE INDEX tasks_due ON tasks (state, not_before);
CREATE INDEX tasks_kind_created ON tasks (kind, created_at);
