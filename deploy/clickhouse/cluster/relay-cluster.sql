-- relay's tables on a ClickHouse cluster. Made by tools/clickhouse/cluster-variant
-- from deploy/clickhouse/migrations; do not edit. Needs a cluster named in
-- {cluster} (remote_servers) with the {shard} and {replica} macros, and
-- ClickHouse Keeper or ZooKeeper. docs/capacity.md explains the layout.
CREATE DATABASE IF NOT EXISTS relay ON CLUSTER '{cluster}';

-- webhook_deliveries (0001_tables.sql)
CREATE TABLE IF NOT EXISTS relay.webhook_deliveries_local ON CLUSTER '{cluster}' (
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
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/relay/webhook_deliveries_local', '{replica}', version)
PARTITION BY toYYYYMM(received_at) ORDER BY (delivery_id, body_sha256);
CREATE TABLE IF NOT EXISTS relay.webhook_deliveries ON CLUSTER '{cluster}' AS relay.webhook_deliveries_local
ENGINE = Distributed('{cluster}', relay, webhook_deliveries_local, cityHash64(delivery_id));

-- workflow_job (0001_tables.sql)
CREATE TABLE IF NOT EXISTS relay.workflow_job_local ON CLUSTER '{cluster}' (
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
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/relay/workflow_job_local', '{replica}', version)
PARTITION BY toYYYYMM(created_at) ORDER BY id;
CREATE TABLE IF NOT EXISTS relay.workflow_job ON CLUSTER '{cluster}' AS relay.workflow_job_local
ENGINE = Distributed('{cluster}', relay, workflow_job_local, cityHash64(id));

-- workflow_run (0001_tables.sql)
CREATE TABLE IF NOT EXISTS relay.workflow_run_local ON CLUSTER '{cluster}' (
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
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/relay/workflow_run_local', '{replica}', version)
PARTITION BY toYYYYMM(created_at) ORDER BY (id, run_attempt);
CREATE TABLE IF NOT EXISTS relay.workflow_run ON CLUSTER '{cluster}' AS relay.workflow_run_local
ENGINE = Distributed('{cluster}', relay, workflow_run_local, cityHash64(id));

-- dispatches (0001_tables.sql)
CREATE TABLE IF NOT EXISTS relay.dispatches_local ON CLUSTER '{cluster}' (
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
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/relay/dispatches_local', '{replica}', version)
PARTITION BY toYYYYMM(dispatched_at) ORDER BY request_id;
CREATE TABLE IF NOT EXISTS relay.dispatches ON CLUSTER '{cluster}' AS relay.dispatches_local
ENGINE = Distributed('{cluster}', relay, dispatches_local, cityHash64(request_id));

-- github_outcomes (0001_tables.sql)
CREATE TABLE IF NOT EXISTS relay.github_outcomes_local ON CLUSTER '{cluster}' (
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
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/relay/github_outcomes_local', '{replica}', version)
PARTITION BY toYYYYMM(finished_at) ORDER BY request_id;
CREATE TABLE IF NOT EXISTS relay.github_outcomes ON CLUSTER '{cluster}' AS relay.github_outcomes_local
ENGINE = Distributed('{cluster}', relay, github_outcomes_local, cityHash64(request_id));

-- crcr_workflow_job (0001_tables.sql)
CREATE TABLE IF NOT EXISTS relay.crcr_workflow_job_local ON CLUSTER '{cluster}' (
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
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/relay/crcr_workflow_job_local', '{replica}', version)
PARTITION BY toYYYYMM(dispatched_at) ORDER BY id;
CREATE TABLE IF NOT EXISTS relay.crcr_workflow_job ON CLUSTER '{cluster}' AS relay.crcr_workflow_job_local
ENGINE = Distributed('{cluster}', relay, crcr_workflow_job_local, cityHash64(id));

-- test_results (0001_tables.sql)
CREATE TABLE IF NOT EXISTS relay.test_results_local ON CLUSTER '{cluster}' (
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
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/relay/test_results_local', '{replica}', version)
PARTITION BY toYYYYMM(day) ORDER BY (repo, day, file, classname, name, upload_id, seq, idx);
CREATE TABLE IF NOT EXISTS relay.test_results ON CLUSTER '{cluster}' AS relay.test_results_local
ENGINE = Distributed('{cluster}', relay, test_results_local, cityHash64(upload_id));

-- cluster_events (0001_tables.sql)
CREATE TABLE IF NOT EXISTS relay.cluster_events_local ON CLUSTER '{cluster}' (
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
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/relay/cluster_events_local', '{replica}', version)
PARTITION BY toYYYYMM(at) ORDER BY (cluster_id, event_id);
CREATE TABLE IF NOT EXISTS relay.cluster_events ON CLUSTER '{cluster}' AS relay.cluster_events_local
ENGINE = Distributed('{cluster}', relay, cluster_events_local, cityHash64(cluster_id));

-- rollup_marks (0002_rollups.sql)
CREATE TABLE IF NOT EXISTS relay.rollup_marks_local ON CLUSTER '{cluster}' (
  kind String,
  day Date,
  repo String,
  marked_at_ms UInt64
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/relay/rollup_marks_local', '{replica}', marked_at_ms)
PARTITION BY toYYYYMM(day) ORDER BY (kind, day, repo);
CREATE TABLE IF NOT EXISTS relay.rollup_marks ON CLUSTER '{cluster}' AS relay.rollup_marks_local
ENGINE = Distributed('{cluster}', relay, rollup_marks_local, cityHash64(repo, day));

-- rollup_state (0002_rollups.sql)
CREATE TABLE IF NOT EXISTS relay.rollup_state_local ON CLUSTER '{cluster}' (
  kind String,
  day Date,
  repo String,
  computed_from_ms UInt64
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/relay/rollup_state_local', '{replica}', computed_from_ms)
PARTITION BY toYYYYMM(day) ORDER BY (kind, day, repo);
CREATE TABLE IF NOT EXISTS relay.rollup_state ON CLUSTER '{cluster}' AS relay.rollup_state_local
ENGINE = Distributed('{cluster}', relay, rollup_state_local, cityHash64(repo, day));

-- test_daily (0002_rollups.sql)
CREATE TABLE IF NOT EXISTS relay.test_daily_local ON CLUSTER '{cluster}' (
  day Date,
  repo String,
  file String,
  classname String,
  name String,
  runs UInt64,
  passed UInt64,
  failed UInt64,
  skipped UInt64,
  rerun_passed UInt64,
  flaky_shas UInt64,
  duration_sum Float64,
  duration_max Float64,
  computed_at_ms UInt64
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/relay/test_daily_local', '{replica}', computed_at_ms)
PARTITION BY toYYYYMM(day) ORDER BY (repo, day, file, classname, name);
CREATE TABLE IF NOT EXISTS relay.test_daily ON CLUSTER '{cluster}' AS relay.test_daily_local
ENGINE = Distributed('{cluster}', relay, test_daily_local, cityHash64(repo, day));

-- test_file_daily (0002_rollups.sql)
CREATE TABLE IF NOT EXISTS relay.test_file_daily_local ON CLUSTER '{cluster}' (
  day Date,
  repo String,
  file String,
  tests UInt64,
  uploads UInt64,
  runs UInt64,
  failed UInt64,
  skipped UInt64,
  duration_sum Float64,
  computed_at_ms UInt64
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/relay/test_file_daily_local', '{replica}', computed_at_ms)
PARTITION BY toYYYYMM(day) ORDER BY (repo, day, file);
CREATE TABLE IF NOT EXISTS relay.test_file_daily ON CLUSTER '{cluster}' AS relay.test_file_daily_local
ENGINE = Distributed('{cluster}', relay, test_file_daily_local, cityHash64(repo, day));

-- test_flaky_daily (0003_rollup_snapshots.sql)
CREATE TABLE IF NOT EXISTS relay.test_flaky_daily_local ON CLUSTER '{cluster}' (
  day Date,
  repo String,
  file String,
  classname String,
  name String,
  runs UInt64,
  failed UInt64,
  rerun_passed UInt64,
  flaky_shas UInt64,
  computed_at_ms UInt64
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/relay/test_flaky_daily_local', '{replica}', computed_at_ms)
PARTITION BY toYYYYMM(day) ORDER BY (repo, day, computed_at_ms, file, classname, name);
CREATE TABLE IF NOT EXISTS relay.test_flaky_daily ON CLUSTER '{cluster}' AS relay.test_flaky_daily_local
ENGINE = Distributed('{cluster}', relay, test_flaky_daily_local, cityHash64(repo, day));

-- test_slowest_daily (0003_rollup_snapshots.sql)
CREATE TABLE IF NOT EXISTS relay.test_slowest_daily_local ON CLUSTER '{cluster}' (
  day Date,
  repo String,
  file String,
  classname String,
  name String,
  runs UInt64,
  duration_sum Float64,
  duration_max Float64,
  computed_at_ms UInt64
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/relay/test_slowest_daily_local', '{replica}', computed_at_ms)
PARTITION BY toYYYYMM(day) ORDER BY (repo, day, computed_at_ms, file, classname, name);
CREATE TABLE IF NOT EXISTS relay.test_slowest_daily ON CLUSTER '{cluster}' AS relay.test_slowest_daily_local
ENGINE = Distributed('{cluster}', relay, test_slowest_daily_local, cityHash64(repo, day));

-- superseded_dispatches (0005_superseded_dispatches.sql)
CREATE TABLE IF NOT EXISTS relay.superseded_dispatches_local ON CLUSTER '{cluster}' (
  request_id String,
  delivery_id String,
  upstream_repo String,
  downstream_repo String,
  level UInt8,
  pr_number Int64,
  head_sha String,
  superseded_by String,
  superseded_at DateTime,
  superseded_at_ms Int64,
  version UInt64
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/relay/superseded_dispatches_local', '{replica}', version)
PARTITION BY toYYYYMM(superseded_at) ORDER BY request_id;
CREATE TABLE IF NOT EXISTS relay.superseded_dispatches ON CLUSTER '{cluster}' AS relay.superseded_dispatches_local
ENGINE = Distributed('{cluster}', relay, superseded_dispatches_local, cityHash64(request_id));
