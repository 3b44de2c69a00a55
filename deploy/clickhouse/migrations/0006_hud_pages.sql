-- relay's ClickHouse schema, migration 6: the rest of what the PyTorch
-- HUD's pages read (pytorch/test-infra torchci/clickhouse_queries, all 192
-- vendored in tests/hud/clickhouse_queries), under the HUD's names, as
-- migration 4 did for its first 11 queries. tools/clickhouse/check-hud
-- runs all 192 on chDB over relay's migrations and says, for each query
-- that does not run, why (docs/hud-compatibility.md).
--
-- requires: ClickHouse >= 23.3
-- (as migration 4: views with named tuples and DateTime64; Map and
-- AggregateFunction columns; the HUD's queries need query parameters and
-- the current analyzer.)
--
-- Two kinds of objects (docs/hud-compatibility.md lists each, with who
-- fills it):
-- - Tables other systems fill (vLLM's Buildkite, the benchmark uploads,
--   autorevert and its advisor, Claude usage, the utilization monitor,
--   test-infra's jobs): created with the HUD's layout (the DDL test-infra
--   publishes, with a plain MergeTree engine; where it publishes none, the
--   columns the queries read), empty. The pages that read them show
--   nothing instead of failing; the system that fills them can write to
--   them unchanged.
-- - Views over relay's tables and the raw webhook payloads, for what relay
--   receives itself. Unqualified names are relay's tables (a view binds
--   them to the database current when it is created).

CREATE DATABASE IF NOT EXISTS benchmark;
CREATE DATABASE IF NOT EXISTS vllm;

-- The HUD's lookup view of jobs by start time (ttrs_percentiles), over
-- migration 4's default.workflow_job.
CREATE OR REPLACE VIEW materialized_views.workflow_job_by_started_at AS SELECT id, started_at FROM default.workflow_job;

-- Tables of other systems, as test-infra publishes them.

-- misc.ai_advisor_dispatches (test-infra torchci/clickhouse_db_schema/misc.ai_advisor_dispatches/schema.sql)
CREATE TABLE IF NOT EXISTS misc.ai_advisor_dispatches (
  owner LowCardinality(String),
  repo LowCardinality(String),
  head_sha FixedString(40),
  signal_key String,
  state Enum8('dispatching' = 1, 'dispatched' = 2, 'failed' = 3),
  retry_count UInt8 DEFAULT 0,
  pr_number Int64,
  job_name String,
  version DateTime64(3),
  _inserted_at DateTime MATERIALIZED now()
) ENGINE = ReplacingMergeTree(version)
ORDER BY (owner, repo, head_sha, signal_key);

-- misc.autorevert_advisor_verdicts (test-infra clickhouse_db_schema/misc.autorevert_advisor_verdicts/schema.sql)
CREATE TABLE IF NOT EXISTS misc.autorevert_advisor_verdicts (
  repo LowCardinality(String),
  run_id Int64,
  run_attempt Int32,
  timestamp DateTime64(3),
  suspect_commit FixedString(40),
  pr_number Int64,
  signal_key String,
  signal_source LowCardinality(String),
  workflow_name String,
  verdict Enum8('revert' = 1, 'unsure' = 2, 'not_related' = 3, 'garbage' = 4, 'related' = 5, 'infra_issue' = 6),
  confidence Float32,
  summary String,
  causal_reasoning String,
  _meta Tuple(bucket String, key String),
  _inserted_at DateTime MATERIALIZED now()
) ENGINE = MergeTree()
ORDER BY (repo, suspect_commit, signal_key, timestamp);

-- misc.autorevert_events_v2 (test-infra clickhouse_db_schema/misc.autorevert_events_v2/schema.sql)
CREATE TABLE IF NOT EXISTS misc.autorevert_events_v2 (
  ts DateTime DEFAULT now(),
  repo LowCardinality(String) DEFAULT 'pytorch/pytorch',
  action Enum8('none' = 0, 'restart' = 1, 'revert' = 2, 'advisor' = 3),
  commit_sha FixedString(40),
  workflows Array(String),
  source_signal_keys Array(String),
  dry_run UInt8 DEFAULT 0,
  failed UInt8 DEFAULT 0,
  notes String DEFAULT ''
) ENGINE = ReplacingMergeTree()
PARTITION BY toYYYYMM(ts)
ORDER BY (repo, commit_sha, action, ts);

-- misc.autorevert_state (test-infra clickhouse_db_schema/misc.autorevert_state/schema.sql)
CREATE TABLE IF NOT EXISTS misc.autorevert_state (
  ts DateTime DEFAULT now(),
  repo LowCardinality(String) DEFAULT 'pytorch/pytorch',
  state String,
  dry_run UInt8 DEFAULT 0,
  workflows Array(String),
  lookback_hours UInt16,
  params String DEFAULT ''
) ENGINE = ReplacingMergeTree()
PARTITION BY toYYYYMM(ts)
ORDER BY (repo, ts, dry_run);

-- misc.claude_code_usage (test-infra clickhouse_db_schema/misc.claude_code_usage/schema.sql)
CREATE TABLE IF NOT EXISTS misc.claude_code_usage (
  repo String,
  run_id Int64,
  run_attempt Int32,
  actor String,
  event_name String,
  pr_number Int64,
  timestamp DateTime64(3),
  duration_ms Int64,
  num_turns Int32,
  total_cost_usd Float64,
  input_tokens Int64 DEFAULT 0,
  output_tokens Int64 DEFAULT 0,
  cache_read_input_tokens Int64 DEFAULT 0,
  cache_creation_input_tokens Int64 DEFAULT 0,
  model String DEFAULT '',
  _meta Tuple(bucket String, key String),
  _inserted_at DateTime MATERIALIZED now()
) ENGINE = MergeTree()
ORDER BY (repo, timestamp, run_id);

-- benchmark.oss_ci_benchmark_v3 (test-infra clickhouse_db_schema/benchmark.oss_ci_benchmark_v3/schema.sql)
CREATE TABLE IF NOT EXISTS benchmark.oss_ci_benchmark_v3 (
  timestamp UInt64,
  schema_version String DEFAULT 'v3',
  name String,
  repo String DEFAULT 'pytorch/pytorch',
  head_branch String,
  head_sha String,
  workflow_id UInt64,
  run_attempt UInt32,
  job_id UInt64,
  servicelab_experiment_id UInt64 DEFAULT '0',
  servicelab_trial_id UInt64 DEFAULT '0',
  _meta Tuple(bucket String, key String),
  runners Array(Tuple(name String, type String, cpu_info String, cpu_count UInt32, mem_info String,
      avail_mem_in_gb UInt32, gpu_info String, gpu_count UInt32, gpu_mem_info String, avail_gpu_mem_in_gb
      UInt32, extra_info Map(String, String))),
  benchmark Tuple(name String, mode String, dtype String, extra_info Map(String, String)),
  model Tuple (name String, type String, backend String, origins Array(String), extra_info Map(String, String)),
  inputs Map(String, Tuple(dtype String, extra_info Map(String, String))),
  dependencies Map(String, Tuple(repo String, branch String, sha String, version String, extra_info Map(String,
      String))),
  metric Tuple(name String, benchmark_values Array(Float32), target_value Float32, extra_info Map(String,
      String))
) ENGINE = MergeTree()
ORDER BY (timestamp, head_branch, head_sha, workflow_id, job_id, servicelab_experiment_id, servicelab_trial_id);

-- benchmark.oss_ci_benchmark_metadata (test-infra clickhouse_db_schema/oss_ci_benchmark_v3_materialized_views/schema.sql)
CREATE TABLE IF NOT EXISTS benchmark.oss_ci_benchmark_metadata (
  repo String,
  benchmark_name String,
  benchmark_dtype String,
  benchmark_mode String,
  model_name String,
  model_backend String,
  device String,
  arch String,
  metric_name String,
  head_branch String,
  head_sha String,
  workflow_id UInt64,
  timestamp UInt64
) ENGINE = MergeTree()
ORDER BY (repo, benchmark_name, benchmark_dtype, benchmark_mode, model_name, model_backend, device, arch, metric_name, head_branch, workflow_id,
  timestamp);

-- benchmark.oss_ci_benchmark_torchinductor (test-infra clickhouse_db_schema/oss_ci_benchmark_torchinductor_materialized_views/schema.sql)
CREATE TABLE IF NOT EXISTS benchmark.oss_ci_benchmark_torchinductor (
  device String,
  arch String,
  model_name String,
  suite String,
  metric_name String,
  value Float32,
  metric_extra_info Map(String, String),
  benchmark_dtype String,
  benchmark_mode String,
  benchmark_extra_info Map(String, String),
  head_branch String,
  head_sha String,
  workflow_id UInt64,
  job_id UInt64,
  timestamp UInt64
) ENGINE = MergeTree()
ORDER BY (device, arch, model_name, metric_name, benchmark_dtype, benchmark_mode, head_branch, workflow_id,
  timestamp);

-- vllm.vllm_buildkite_jobs (test-infra clickhouse_db_schema/vllm/vllm_buildkite_jobs/schema.sql)
CREATE TABLE IF NOT EXISTS vllm.vllm_buildkite_jobs (
  dynamoKey String,
  build Tuple(finished_at Nullable(DateTime64(3)), graphql_id String, commit String, created_at DateTime64(3),
      scheduled_at Nullable(DateTime64(3)), source String, branch String, blocked_state String, cluster_url
      String, number UInt32, cluster_id String, blocked Bool, meta_data String, id String, state String, tag
      Nullable(String), creator Tuple(name Nullable(String), created_at Nullable(DateTime64(3)), id
      Nullable(String), avatar_url Nullable(String), graphql_id Nullable(String), email Nullable(String)),
      pull_request Tuple(id Nullable(String), repository Nullable(String), base Nullable(String), labels
      Array(String)), author Tuple(name String, email String, username String), message String, rebuilt_from
      Nullable(String), url String, cancel_reason Nullable(String), web_url String, started_at
      Nullable(DateTime64(3))),
  event String,
  job Tuple(retried Bool, agent Tuple(last_job_finished_at Nullable(DateTime64(3)), creator Nullable(String),
      paused Bool, created_at DateTime64(3), ip_address String, connection_state String, priority UInt32,
      version String, url String, cluster_url String, hostname String, paused_at Nullable(DateTime64(3)),
      web_url String, cluster_queue_url String, name String, meta_data Array(String), paused_timeout_in_minutes
      UInt32, id String, paused_note Nullable(String), job Nullable(String), user_agent String, paused_by
      Nullable(String)), finished_at Nullable(DateTime64(3)), parallel_group_index Nullable(UInt32), graphql_id
      String, artifacts_url String, step_key Nullable(String), created_at DateTime64(3), scheduled_at
      DateTime64(3), expired_at Nullable(DateTime64(3)), retries_count Nullable(UInt32), type String,
      exit_status Nullable(Int32), matrix Nullable(String), cluster_url String, cluster_id String, soft_failed
      Bool, retried_in_job_id Nullable(String), log_url String, retry_source Nullable(String), id String, state
      String, build_url String, retry_type Nullable(String), priority Tuple(number UInt32), agent_query_rules
      Array(String), command String, raw_log_url String, cluster_queue_id String, web_url String,
      cluster_queue_url String, parallel_group_total Nullable(UInt32), name String, started_at
      Nullable(DateTime64(3)), step Tuple(signature Nullable(String), id String), artifact_paths
      Nullable(String), runnable_at DateTime64(3)),
  pipeline Tuple(allow_rebuilds Bool, running_jobs_count UInt32, emoji String, color Nullable(String),
      graphql_id String, configuration String, description String, created_at DateTime64(3),
      skip_queued_branch_builds Bool, repository String, pipeline_template_uuid Nullable(String), cluster_url
      String, skip_queued_branch_builds_filter String, cluster_id String, cancel_running_branch_builds Bool,
      provider Tuple(webhook_url String, settings String, id String), waiting_jobs_count UInt32, id String, slug
      String, badge_url String, visibility String, archived_at Nullable(DateTime64(3)), scheduled_jobs_count
      UInt32, running_builds_count UInt32, env Nullable(String), created_by Tuple(name Nullable(String),
      created_at Nullable(DateTime64(3)), id Nullable(String), avatar_url Nullable(String), graphql_id
      Nullable(String), email Nullable(String)), steps String, url String, tags Nullable(String),
      scheduled_builds_count UInt32, builds_url String, web_url String, name String, default_branch String,
      branch_configuration Nullable(String), cancel_running_branch_builds_filter Nullable(String)),
  sender Tuple(name Nullable(String), id Nullable(String))
) ENGINE = ReplacingMergeTree()
ORDER BY (pipeline.repository, pipeline.name, build.number, job.created_at, job.id, dynamoKey);

-- vllm.vllm_buildkite_builds (test-infra clickhouse_db_schema/vllm/vllm_buildkite_builds/schema.sql)
CREATE TABLE IF NOT EXISTS vllm.vllm_buildkite_builds (
  dynamoKey String,
  build Tuple(finished_at Nullable(DateTime64(3)), graphql_id String, commit String, created_at DateTime64(3),
      scheduled_at Nullable(DateTime64(3)), source String, branch String, blocked_state String, cluster_url
      String, number UInt32, cluster_id String, blocked Bool, meta_data String, id String, state String, tag
      Nullable(String), creator Tuple(name Nullable(String), created_at Nullable(DateTime64(3)), id
      Nullable(String), avatar_url Nullable(String), graphql_id Nullable(String), email Nullable(String)),
      pull_request Tuple(id Nullable(String), repository Nullable(String), base Nullable(String), labels
      Array(String)), author Tuple(name String, email String, username String), message String, rebuilt_from
      Nullable(String), url String, cancel_reason Nullable(String), web_url String, started_at
      Nullable(DateTime64(3))),
  event String,
  pipeline Tuple(allow_rebuilds Bool, running_jobs_count UInt32, emoji String, color Nullable(String),
      graphql_id String, configuration String, description String, created_at DateTime64(3),
      skip_queued_branch_builds Bool, repository String, pipeline_template_uuid Nullable(String), cluster_url
      String, skip_queued_branch_builds_filter String, cluster_id String, cancel_running_branch_builds Bool,
      provider Tuple(webhook_url String, settings String, id String), waiting_jobs_count UInt32, id String, slug
      String, badge_url String, visibility String, archived_at Nullable(DateTime64(3)), scheduled_jobs_count
      UInt32, running_builds_count UInt32, env Nullable(String), created_by Tuple(name Nullable(String),
      created_at Nullable(DateTime64(3)), id Nullable(String), avatar_url Nullable(String), graphql_id
      Nullable(String), email Nullable(String)), steps String, url String, tags Nullable(String),
      scheduled_builds_count UInt32, builds_url String, web_url String, name String, default_branch String,
      branch_configuration Nullable(String), cancel_running_branch_builds_filter Nullable(String)),
  sender Tuple(name Nullable(String), id Nullable(String))
) ENGINE = ReplacingMergeTree()
ORDER BY (pipeline.repository, pipeline.name, build.number, dynamoKey);

-- misc.oss_ci_queue_time_histogram (test-infra clickhouse_db_schema/misc.oss_ci_queue_time_histogram/schema.sql,
-- plus time, avg_queue_time and runner_labels, which its queries read and that DDL lacks)
CREATE TABLE IF NOT EXISTS misc.oss_ci_queue_time_histogram (
  created_at DateTime64(0, 'UTC'),
  time_stamp DateTime64(0, 'UTC'),
  type String,
  repo String DEFAULT 'pytorch/pytorch',
  workflow_name String,
  job_name String,
  machine_type String,
  histogram_version String,
  histogram Array(UInt64),
  max_queue_time UInt64,
  total_count UInt64,
  extra_info Map(String,String),
  time DateTime64(0, 'UTC'),
  avg_queue_time Float64,
  runner_labels Array(String)
) ENGINE = MergeTree()
PARTITION BY toYYYYMM(created_at)
ORDER BY (job_name, workflow_name, machine_type, time_stamp, repo, type);

-- misc.oss_ci_utilization_metadata (test-infra clickhouse_db_schema/oss_ci_utilization/oss_ci_utilization_metadata_schema.sql)
CREATE TABLE IF NOT EXISTS misc.oss_ci_utilization_metadata (
  created_at DateTime64(0, 'UTC'),
  repo String DEFAULT 'pytorch/pytorch',
  workflow_id UInt64,
  run_attempt UInt32,
  job_id UInt64,
  workflow_name String,
  job_name String,
  usage_collect_interval Float32,
  data_model_version String,
  gpu_count UInt32,
  cpu_count UInt32,
  gpu_type String DEFAULT 'None',
  start_at DateTime64(0, 'UTC'),
  end_at DateTime64(0, 'UTC'),
  segments Array(Tuple(level String, name String, start_at DateTime64(0, 'UTC'), end_at DateTime64(0, 'UTC'),
      extra_info Map(String, String))) DEFAULT [],
  tags Array(String) DEFAULT [],
  _meta Tuple(bucket String, key String)
) ENGINE = MergeTree()
PARTITION BY toYYYYMM(start_at)
ORDER BY (workflow_id, job_id, repo, workflow_name, job_name, start_at);

-- misc.oss_ci_time_series (test-infra clickhouse_db_schema/oss_ci_utilization/oss_ci_time_series_schema.sql)
CREATE TABLE IF NOT EXISTS misc.oss_ci_time_series (
  created_at DateTime64(0,'UTC'),
  type String,
  tags Array(String) DEFAULT [],
  time_stamp DateTime64(0,'UTC'),
  repo String DEFAULT 'pytorch/pytorch',
  workflow_id UInt64,
  run_attempt UInt32,
  job_id UInt64,
  workflow_name String,
  job_name String,
  json_data String DEFAULT '{}',
  _meta Tuple(bucket String, key String)
) ENGINE = MergeTree()
PARTITION BY toYYYYMM(time_stamp)
ORDER BY (workflow_id, job_id, repo, workflow_name, job_name, type, time_stamp);

-- misc.oss_ci_utilization_summary_report_v1 (test-infra
-- clickhouse_db_schema/oss_ci_utilization/oss_ci_utilization_summary_report_v1.sql, there
-- unqualified; the queries read it in misc). extra_info and version as
-- SimpleAggregateFunction(any / max): a current ClickHouse refuses plain
-- columns outside an AggregatingMergeTree's key; no query reads them.
CREATE TABLE IF NOT EXISTS misc.oss_ci_utilization_summary_report_v1 (
  time Date,
  group_key String,
  parent_group String,
  run_counts AggregateFunction(countDistinct, UInt64),
  ids AggregateFunction(groupArray, String),
  report_type String DEFAULT 'default',
  cpu_avg_state AggregateFunction(avg, Float64),
  memory_avg_state AggregateFunction(avg, Float64),
  gpu_avg_state AggregateFunction(avg, Float64),
  gpu_mem_state AggregateFunction(avg, Float64),
  cpu_p_state AggregateFunction(quantilesTDigest(0.1, 0.5, 0.9, 0.95, 0.98), Float64),
  memory_p_state AggregateFunction(quantilesTDigest(0.1, 0.5, 0.9, 0.95, 0.98), Float64),
  gpu_p_state AggregateFunction(quantilesTDigest(0.1, 0.5, 0.9, 0.95, 0.98), Float64),
  gpu_mem_p_state AggregateFunction(quantilesTDigest(0.1, 0.5, 0.9, 0.95, 0.98), Float64),
  extra_info SimpleAggregateFunction(any, Map(String, String)),
  version SimpleAggregateFunction(max, UInt64) DEFAULT toUnixTimestamp(now())
) ENGINE = AggregatingMergeTree()
ORDER BY (report_type, time, group_key, parent_group);

-- Tables of other systems test-infra publishes no DDL for: the columns the
-- HUD's queries read, typed as they use them.

-- TorchBench's user benchmarks (TorchBench's upload).
CREATE TABLE IF NOT EXISTS benchmark.torchbench_userbenchmark (
  name String,
  environ String,
  metrics String,
  timestamp DateTime64(3, 'UTC')
) ENGINE = MergeTree ORDER BY (name, timestamp);

-- External contributions per day (test-infra's contribution-stats job).
CREATE TABLE IF NOT EXISTS misc.external_contribution_stats (
  date Date,
  pr_count UInt32,
  user_count UInt32,
  users Array(String)
) ENGINE = ReplacingMergeTree ORDER BY date;

-- Queue times of the last 24 hours per machine type (test-infra's
-- queue-time job).
CREATE TABLE IF NOT EXISTS misc.queue_times_24h_stats (
  time DateTime64(9, 'UTC'),
  machine_type String,
  queue_s_avg Float64,
  queue_s_max Float64,
  queue_s_p50 Float64,
  queue_s_p80 Float64,
  queue_s_p90 Float64,
  queue_s_p95 Float64,
  queue_s_p99 Float64,
  count UInt64
) ENGINE = MergeTree ORDER BY (machine_type, time);

-- Commits viable/strict moved to (test-infra's update-viablestrict job).
CREATE TABLE IF NOT EXISTS misc.stable_pushes (
  repository String,
  sha String,
  timestamp DateTime64(9, 'UTC')
) ENGINE = ReplacingMergeTree ORDER BY (repository, sha);

-- A commit's merge base with main (test-infra's merge-base job, from git).
CREATE TABLE IF NOT EXISTS default.merge_bases (
  repo String,
  sha String,
  merge_base String,
  merge_base_commit_date DateTime64(3, 'UTC'),
  changed_files Array(String)
) ENGINE = ReplacingMergeTree ORDER BY (repo, sha);

-- Disabled tests run again to see whether they still fail (PyTorch CI's
-- rerun_disabled_tests reports, uploaded by its upload-test-stats job).
CREATE TABLE IF NOT EXISTS default.rerun_disabled_tests (
  name String,
  classname String,
  filename String,
  flaky Bool,
  num_green Int64,
  num_red Int64,
  workflow_id Int64,
  job_id Int64
) ENGINE = MergeTree ORDER BY (name, classname, filename, workflow_id);

-- The merge bot's record of each merge (pytorchbot's trymerge writes one
-- row per merge attempt: the -f/-i flags, the checks that failed, were
-- pending or ignored, the comment that asked). Relay has merges only as
-- GitHub reports them: this view holds one row per pull request GitHub
-- closed as merged (a `closed` pull_request delivery with merged true),
-- its merge commit and base; the bot's fields are at their defaults (no
-- forced merge, no checks, comment_id 0). PyTorch's own PRs are landed by
-- the bot pushing to main and closed unmerged, so they are not here.
CREATE OR REPLACE VIEW default.merges AS
WITH JSONExtract(payload, 'pull_request',
  'Tuple(number Int64, merged Bool, merge_commit_sha String, merged_at String,
         merged_by Tuple(login String), head Tuple(sha String), base Tuple(sha String))') AS p
SELECT
  splitByChar('/', repo)[1] AS owner,
  splitByChar('/', repo)[2] AS project,
  p.number AS pr_num,
  p.merge_commit_sha AS merge_commit_sha,
  p.base.sha AS merge_base_sha,
  p.head.sha AS last_commit_sha,
  p.merged_by.login AS author,
  toInt64(0) AS comment_id,
  CAST([], 'Array(String)') AS pending_checks,
  CAST([], 'Array(String)') AS failed_checks,
  CAST([], 'Array(String)') AS ignore_current_checks,
  CAST([], 'Array(String)') AS broken_trunk_checks,
  CAST([], 'Array(String)') AS flaky_checks,
  CAST([], 'Array(String)') AS unstable_checks,
  false AS is_failed,
  false AS dry_run,
  false AS skip_mandatory_checks,
  false AS ignore_current,
  '' AS error,
  parseDateTime64BestEffortOrZero(p.merged_at, 3, 'UTC') AS merged_at,
  delivery_id AS _id
FROM webhook_deliveries FINAL
WHERE event = 'pull_request' AND action = 'closed' AND p.merged
ORDER BY received_at_ms DESC
LIMIT 1 BY repo, p.number;
