-- relay's ClickHouse schema, migration 1: the tables stats lands records in.
-- Applied by `relay-stats migrate` (never by hand), in the database of
-- clickhouse.database; statements are idempotent (IF NOT EXISTS) so a
-- migration cut short is simply applied again. Runs on ClickHouse 18.16 and
-- on current releases (tools/clickhouse/check-sql checks the latter).
--
-- Replay safety, for every table: rows carry a deterministic identity (the
-- ORDER BY key, made of ids from the record itself), a version taken from
-- the record, and a partition by the event's own time, so a record inserted
-- twice (restart, rebalance, operator replay) is the same row twice in the
-- same partition, collapsed by ReplacingMergeTree at merge time. Queries
-- read with FINAL (or LIMIT 1 BY the identity) so they are exact before any
-- merge. 18.16 has no DateTime64: times are DateTime (UTC seconds) with a
-- *_ms column beside where milliseconds matter. 0 (1970-01-01) = unknown.

-- Every webhook delivery intake accepted (github.webhooks), raw payload
-- included. A different body under a known delivery id (intake records it
-- as a conflict) is a different row: body_sha256 is part of the identity.
CREATE TABLE IF NOT EXISTS webhook_deliveries (
  delivery_id String,
  event String,
  action String,
  repo String,
  repository_id Int64,
  installation_id Int64,
  received_at DateTime,
  received_at_ms Int64,
  body_sha256 String,
  content_type String,
  payload String,
  version UInt64
) ENGINE = ReplacingMergeTree(version)
PARTITION BY toYYYYMM(received_at)
ORDER BY (delivery_id, body_sha256);

-- workflow_job webhooks, one row per job (HUD's workflow_job columns). The
-- version ranks the status (queued < in_progress < completed) above the
-- receive time, so a late-delivered in_progress never hides completed.
CREATE TABLE IF NOT EXISTS workflow_job (
  id UInt64,
  run_id UInt64,
  run_attempt UInt32,
  name String,
  workflow_name String,
  head_sha String,
  head_branch String,
  status String,
  conclusion String,
  created_at DateTime,
  started_at DateTime,
  completed_at DateTime,
  labels Array(String),
  runner_id UInt64,
  runner_name String,
  runner_group_name String,
  steps Nested(name String, status String, conclusion String, number UInt32, started_at DateTime, completed_at DateTime),
  html_url String,
  repository_full_name String,
  delivery_id String,
  received_at DateTime,
  version UInt64
) ENGINE = ReplacingMergeTree(version)
PARTITION BY toYYYYMM(created_at)
ORDER BY id;

-- workflow_run webhooks, one row per run attempt (HUD's workflow_run
-- columns). Version: status rank, then updated_at.
CREATE TABLE IF NOT EXISTS workflow_run (
  id UInt64,
  run_attempt UInt32,
  run_number UInt64,
  workflow_id UInt64,
  name String,
  event String,
  head_sha String,
  head_branch String,
  status String,
  conclusion String,
  created_at DateTime,
  updated_at DateTime,
  run_started_at DateTime,
  html_url String,
  repository_full_name String,
  head_repository_full_name String,
  pull_request_numbers Array(UInt64),
  delivery_id String,
  received_at DateTime,
  version UInt64
) ENGINE = ReplacingMergeTree(version)
PARTITION BY toYYYYMM(created_at)
ORDER BY (id, run_attempt);

-- repository_dispatch events GitHub accepted (relay.dispatches).
CREATE TABLE IF NOT EXISTS dispatches (
  request_id String,
  delivery_id String,
  upstream_repo String,
  downstream_repo String,
  level UInt8,
  event String,
  action String,
  pr_number Int64,
  head_sha String,
  dispatched_at DateTime,
  dispatched_at_ms Int64,
  slimmed UInt8,
  repeated UInt8,
  version UInt64
) ENGINE = ReplacingMergeTree(version)
PARTITION BY toYYYYMM(dispatched_at)
ORDER BY request_id;

-- Every GitHub write dispatch finished (github.outcomes): budget use,
-- failures, latency.
CREATE TABLE IF NOT EXISTS github_outcomes (
  request_id String,
  kind String,
  repo String,
  endpoint String,
  http_status Int32,
  attempts Int32,
  result String,
  error String,
  finished_at DateTime,
  finished_at_ms Int64,
  latency_ms Int64,
  level UInt8,
  delivery_id String,
  installation_id Int64,
  repeated UInt8,
  version UInt64
) ENGINE = ReplacingMergeTree(version)
PARTITION BY toYYYYMM(finished_at)
ORDER BY request_id;

-- Downstream job results (ci.results), one row per job attempt with the
-- columns of HUD's crcr_workflow_job. Version: the collector's transition
-- counter. queue_time / execution_time in seconds, NULL when unknown.
-- Partitioned by dispatch time, which every version of a job shares.
CREATE TABLE IF NOT EXISTS crcr_workflow_job (
  id String,
  status String,
  downstream_repo String,
  upstream_repo String,
  pr_number Int64,
  head_sha String,
  delivery_id String,
  workflow_run_url String,
  workflow_name String,
  job_name String,
  check_run_id String,
  run_id String,
  run_attempt String,
  conclusion String,
  queue_time Nullable(Float64),
  execution_time Nullable(Float64),
  dispatched_at DateTime,
  started_at DateTime,
  completed_at DateTime,
  total_tests UInt32,
  passed_tests UInt32,
  failed_tests UInt32,
  skipped_tests UInt32,
  failed_test_names Array(String),
  has_test_results UInt8,
  artifact_url String,
  downstream_repo_level UInt8,
  event_type String,
  timed_out_by_sweeper UInt8,
  version UInt64
) ENGINE = ReplacingMergeTree(version)
PARTITION BY toYYYYMM(dispatched_at)
ORDER BY id;

-- Per-test results (ci.test_reports). Identity: the upload, the batch and
-- the case's index in it. Ordered for per-test and per-file reads.
CREATE TABLE IF NOT EXISTS test_results (
  day Date,
  uploaded_at DateTime,
  repo String,
  job_id String,
  delivery_id String,
  run_id String,
  run_attempt String,
  job_name String,
  upload_id String,
  seq UInt32,
  idx UInt32,
  file String,
  classname String,
  name String,
  duration Float64,
  outcome String,
  reruns UInt32,
  message String,
  version UInt64
) ENGINE = ReplacingMergeTree(version)
PARTITION BY toYYYYMM(day)
ORDER BY (repo, day, file, classname, name, upload_id, seq, idx);

-- Cluster lifecycle events (cluster.events, written by relay-lifecycle).
CREATE TABLE IF NOT EXISTS cluster_events (
  event_id String,
  cluster_id String,
  team String,
  kind String,
  state String,
  previous_state String,
  reason String,
  at DateTime,
  at_ms Int64,
  node_group String,
  nodes UInt32,
  cluster_seconds Float64,
  node_seconds Float64,
  provider String,
  version UInt64
) ENGINE = ReplacingMergeTree(version)
PARTITION BY toYYYYMM(at)
ORDER BY (cluster_id, event_id);
