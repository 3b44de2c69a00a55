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
ORDER BY received_at_ms DESC, delivery_id
LIMIT 1 BY repo, pr_num;

-- What relay receives itself: views over relay's tables and the raw
-- webhook payloads (docs/hud-compatibility.md, "Tables relay feeds").
-- Several of migration 4's views are replaced here, the same rows with
-- the columns the rest of the HUD's queries read.

-- default.workflow_job (migration 4's) plus workflow_created_at, the
-- run's creation (the HUD stores it on the job), and _inserted_at, when
-- relay recorded the row's newest version: a webhook's receipt for an
-- upstream job; a downstream job's latest change (dispatch, start or end).
CREATE OR REPLACE VIEW default.workflow_job AS
SELECT
  id, run_id, run_attempt, name, workflow_name, head_sha, head_branch, status, conclusion,
  conclusion AS conclusion_kg,
  html_url,
  concat('https://api.github.com/repos/', repository_full_name, '/actions/jobs/', toString(id)) AS url,
  html_url AS log_url,
  repository_full_name,
  toDateTime64(created, 9, 'UTC') AS created_at,
  toDateTime64(started, 9, 'UTC') AS started_at,
  toDateTime64(completed, 9, 'UTC') AS completed_at,
  labels, runner_id, runner_name, runner_group_name,
  CAST(arrayMap((n, st, c, num, sa, ca) -> (toDateTime64(ca, 9, 'UTC'), c, n, toInt64(num), toDateTime64(sa, 9, 'UTC'), st),
                step_names, step_statuses, step_conclusions, step_numbers, step_started, step_completed),
       'Array(Tuple(completed_at DateTime64(9, \'UTC\'), conclusion String, name String, number Int64, started_at DateTime64(9, \'UTC\'), status String))') AS steps,
  CAST(([], [], 0, '', 0, ''), 'Tuple(captures Array(String), context Array(String), job_id Int64, line String, line_num Int64, rule String)') AS torchci_classification,
  torchci_classification AS torchci_classification_temp,
  torchci_classification AS torchci_classification_kg,
  workflow_event,
  toDateTime64(workflow_created, 9, 'UTC') AS workflow_created_at,
  toDateTime64(inserted, 9, 'UTC') AS _inserted_at,
  concat(repository_full_name, '/', toString(id)) AS dynamoKey
FROM (
  SELECT
    toInt64(j.id) AS id, toInt64(j.run_id) AS run_id, toInt64(j.run_attempt) AS run_attempt,
    j.name AS name, j.workflow_name AS workflow_name, j.head_sha AS head_sha, j.head_branch AS head_branch,
    j.status AS status, j.conclusion AS conclusion, j.html_url AS html_url, j.repository_full_name AS repository_full_name,
    j.created_at AS created, j.started_at AS started, j.completed_at AS completed,
    j.labels AS labels, toInt64(j.runner_id) AS runner_id, j.runner_name AS runner_name, j.runner_group_name AS runner_group_name,
    j.`steps.name` AS step_names, j.`steps.status` AS step_statuses, j.`steps.conclusion` AS step_conclusions,
    j.`steps.number` AS step_numbers, j.`steps.started_at` AS step_started, j.`steps.completed_at` AS step_completed,
    r.event AS workflow_event, r.created AS workflow_created, j.received_at AS inserted
  FROM workflow_job AS j FINAL
  LEFT JOIN (SELECT id, argMax(event, run_attempt) AS event, min(created_at) AS created FROM workflow_run FINAL GROUP BY id) AS r
    ON r.id = j.run_id
  UNION ALL
  SELECT
    relay_hud_job_id(c.id), toInt64OrZero(c.run_id), toInt64(greatest(toUInt32OrZero(c.run_attempt), 1)),
    if(c.job_name = '', c.workflow_name, c.job_name), c.workflow_name, c.head_sha, '',
    c.status, if(c.status = 'completed', c.conclusion, ''), c.workflow_run_url, c.downstream_repo,
    c.dispatched_at, c.started_at, c.completed_at,
    [], 0, '', '',
    [], [], [], [], [], [],
    c.event_type,
    -- the downstream run's creation, as migration 4's default.workflow_run has it
    min(c.dispatched_at) OVER (PARTITION BY c.downstream_repo, c.run_id),
    greatest(c.dispatched_at, c.started_at, c.completed_at)
  FROM crcr_workflow_job AS c FINAL
);

-- default.workflow_run (migration 4's) plus path, the workflow file
-- (.github/workflows/NAME.yml), from the payload.
CREATE OR REPLACE VIEW default.workflow_run AS
WITH JSONExtract(payload, 'workflow_run',
  'Tuple(artifacts_url String, path String,
         head_commit Tuple(author Tuple(email String, name String), committer Tuple(email String, name String), id String, message String, timestamp DateTime64(9, \'UTC\'), tree_id String),
         repository Tuple(owner Tuple(login String)), head_repository Tuple(owner Tuple(login String)),
         actor Tuple(id Int64, login String, type String), triggering_actor Tuple(id Int64, login String, type String),
         pull_requests Array(Tuple(base Tuple(ref String, repo Tuple(id Int64, name String, url String), sha String), head Tuple(ref String, repo Tuple(id Int64, name String, url String), sha String), id Int64, number Int64, url String)))') AS p
SELECT
  id, name, head_sha, head_branch, event, status, conclusion, html_url,
  p.artifacts_url AS artifacts_url,
  p.path AS path,
  toDateTime64(created, 9, 'UTC') AS created_at,
  toDateTime64(updated, 9, 'UTC') AS updated_at,
  toDateTime64(started, 9, 'UTC') AS run_started_at,
  run_attempt, run_number, workflow_id,
  if(p.head_commit.id = '', CAST((('', ''), ('', ''), head_sha, '', toDateTime64(0, 9, 'UTC'), ''), toTypeName(p.head_commit)),
     p.head_commit) AS head_commit,
  CAST((repository_full_name, splitByChar('/', repository_full_name)[2],
        tuple(if(p.repository.owner.login = '', splitByChar('/', repository_full_name)[1], p.repository.owner.login))),
       'Tuple(full_name String, name String, owner Tuple(login String))') AS repository,
  CAST((head_repository_full_name, splitByChar('/', head_repository_full_name)[2],
        tuple(if(p.head_repository.owner.login = '', splitByChar('/', head_repository_full_name)[1], p.head_repository.owner.login))),
       'Tuple(full_name String, name String, owner Tuple(login String))') AS head_repository,
  p.actor AS actor,
  p.triggering_actor AS triggering_actor,
  p.pull_requests AS pull_requests,
  concat(repository_full_name, '/', toString(id)) AS dynamoKey
FROM (
  SELECT
    toInt64(r.id) AS id, r.name AS name, r.head_sha AS head_sha, r.head_branch AS head_branch, r.event AS event,
    r.status AS status, r.conclusion AS conclusion, r.html_url AS html_url,
    r.created_at AS created, r.updated_at AS updated, r.run_started_at AS started,
    toInt64(r.run_attempt) AS run_attempt, toInt64(r.run_number) AS run_number, toInt64(r.workflow_id) AS workflow_id,
    r.repository_full_name AS repository_full_name, r.head_repository_full_name AS head_repository_full_name,
    w.payload AS payload
  FROM (SELECT * FROM workflow_run FINAL ORDER BY id, run_attempt DESC LIMIT 1 BY id) AS r
  LEFT JOIN (SELECT delivery_id, any(payload) AS payload FROM webhook_deliveries FINAL
             WHERE event = 'workflow_run' GROUP BY delivery_id) AS w ON w.delivery_id = r.delivery_id
  UNION ALL
  SELECT
    toInt64OrZero(run_id), workflow_name, head_sha, '', event_type,
    if(completed, 'completed', 'in_progress'), if(completed, conclusion, ''), workflow_run_url,
    created, updated, started, toInt64(attempt), 0, 0,
    downstream_repo, downstream_repo,
    if(pr_number > 0, toJSONString(CAST(tuple(tuple([(pr_number, tuple(head_sha))])),
                                        'Tuple(workflow_run Tuple(pull_requests Array(Tuple(number Int64, head Tuple(sha String)))))')), '')
  FROM (
    SELECT
      downstream_repo, run_id,
      argMax(workflow_name, toUInt32OrZero(run_attempt)) AS workflow_name,
      argMax(head_sha, toUInt32OrZero(run_attempt)) AS head_sha,
      argMax(event_type, toUInt32OrZero(run_attempt)) AS event_type,
      argMax(workflow_run_url, toUInt32OrZero(run_attempt)) AS workflow_run_url,
      argMax(pr_number, toUInt32OrZero(run_attempt)) AS pr_number,
      greatest(max(toUInt32OrZero(run_attempt)), 1) AS attempt,
      min(status = 'completed') = 1 AS completed,
      if(countIf(conclusion NOT IN ('success', 'skipped', 'neutral')) > 0,
         argMaxIf(conclusion, completed_at, conclusion NOT IN ('success', 'skipped', 'neutral')), 'success') AS conclusion,
      min(dispatched_at) AS created,
      max(greatest(completed_at, started_at, dispatched_at)) AS updated,
      min(started_at) AS started
    FROM crcr_workflow_job FINAL
    WHERE toInt64OrZero(run_id) != 0
    GROUP BY downstream_repo, run_id
  )
);

-- default.push (migration 4's) plus commits and head_commit.url.
CREATE OR REPLACE VIEW default.push AS
WITH JSONExtract(payload,
  'Tuple(ref String, before String, after String, forced Bool, compare String,
         head_commit Tuple(id String, message String, timestamp DateTime64(9, \'UTC\'), tree_id String, url String, author Tuple(email String, name String, username String)),
         commits Array(Tuple(id String, message String, timestamp DateTime64(9, \'UTC\'), tree_id String, url String, author Tuple(email String, name String, username String), added Array(String), removed Array(String), modified Array(String))),
         repository Tuple(full_name String, name String, owner Tuple(name String, login String)))') AS p
SELECT p.ref AS ref, p.before AS before, p.after AS after, p.forced AS forced, p.compare AS compare,
       p.head_commit AS head_commit, p.commits AS commits, p.repository AS repository, delivery_id AS dynamoKey
FROM webhook_deliveries FINAL
WHERE event = 'push';

-- default.pull_request (migration 4's) plus draft, merged, merged_by,
-- auto_merge, author_association, body and the base and head repositories.
CREATE OR REPLACE VIEW default.pull_request AS
WITH JSONExtract(payload, 'pull_request',
  'Tuple(number Int64, title String, body String, state String, draft Bool, merged Bool, html_url String,
         created_at String, updated_at String, closed_at String, merged_at String, merge_commit_sha String,
         author_association String, labels Array(Tuple(name String)), user Tuple(login String),
         merged_by Tuple(login String), auto_merge Tuple(merge_method String, enabled_by Tuple(login String)),
         head Tuple(ref String, sha String, repo Tuple(full_name String, name String)),
         base Tuple(ref String, sha String, repo Tuple(full_name String, name String)))') AS p
SELECT p.number AS number, p.title AS title, p.body AS body, p.state AS state, p.draft AS draft, p.merged AS merged,
       p.html_url AS html_url, p.created_at AS created_at, p.updated_at AS updated_at, p.closed_at AS closed_at,
       p.merged_at AS merged_at, p.merge_commit_sha AS merge_commit_sha, p.author_association AS author_association,
       p.labels AS labels, p.head AS head, p.base AS base, p.user AS user, p.merged_by AS merged_by,
       p.auto_merge AS auto_merge,
       repo AS repository_full_name, concat(repo, '/', toString(number)) AS dynamoKey
FROM webhook_deliveries FINAL
WHERE event = 'pull_request'
ORDER BY received_at_ms DESC, delivery_id
LIMIT 1 BY repo, number;

-- default.issues (migration 4's) plus repository_url, author_association
-- and pull_request (set on a pull request's issue).
CREATE OR REPLACE VIEW default.issues AS
WITH JSONExtract(payload, 'issue',
  'Tuple(number Int64, title String, state String, html_url String, body String, created_at String, updated_at String,
         closed_at String, repository_url String, author_association String, assignee Tuple(login String),
         labels Array(Tuple(name String)), user Tuple(login String), pull_request Tuple(url String))') AS i
SELECT i.number AS number, i.title AS title, i.state AS state, i.html_url AS html_url, i.body AS body,
       i.created_at AS created_at, i.updated_at AS updated_at, i.closed_at AS closed_at,
       i.repository_url AS repository_url, i.author_association AS author_association, i.assignee AS assignee,
       i.labels AS labels, i.user AS user, i.pull_request AS pull_request,
       repo AS repository_full_name, concat(repo, '/', toString(number)) AS dynamoKey
FROM webhook_deliveries FINAL
WHERE event = 'issues'
ORDER BY received_at_ms DESC, delivery_id
LIMIT 1 BY repo, number;

-- Comments on issues and pull requests: one row per comment, its newest
-- delivery (created, edited; a deleted comment keeps its last text).
CREATE OR REPLACE VIEW default.issue_comment AS
WITH JSONExtract(payload, 'comment',
  'Tuple(id Int64, body String, html_url String, issue_url String, author_association String,
         created_at DateTime64(9, \'UTC\'), updated_at DateTime64(9, \'UTC\'), user Tuple(login String, type String))') AS c
SELECT c.id AS id, c.body AS body, c.html_url AS html_url, c.issue_url AS issue_url,
       c.author_association AS author_association, c.created_at AS created_at, c.updated_at AS updated_at,
       c.user AS user, repo AS repository_full_name, concat(repo, '/', toString(c.id)) AS dynamoKey
FROM webhook_deliveries FINAL
WHERE event = 'issue_comment'
ORDER BY received_at_ms DESC, delivery_id
LIMIT 1 BY repo, id;

-- Pull request reviews: one row per review, its newest delivery.
CREATE OR REPLACE VIEW default.pull_request_review AS
WITH JSONExtract(payload, 'review',
  'Tuple(id Int64, state String, body String, html_url String, pull_request_url String, author_association String,
         submitted_at Nullable(DateTime64(9, \'UTC\')), user Tuple(login String))') AS r
SELECT r AS review, JSONExtractString(payload, 'action') AS action,
       concat(repo, '/', toString(r.id)) AS dynamoKey
FROM webhook_deliveries FINAL
WHERE event = 'pull_request_review'
ORDER BY received_at_ms DESC, delivery_id
LIMIT 1 BY repo, tupleElement(r, 'id');

-- Labels added to and removed from issues and pull requests: one row per
-- labeled/unlabeled delivery, at the time GitHub sent it.
CREATE OR REPLACE VIEW default.issues_label_event AS
SELECT toDateTime64(received_at, 3, 'UTC') AS event_time, action, repo AS repo_name,
       JSONExtractInt(payload, 'issue', 'number') AS issue_number,
       JSONExtractString(payload, 'label', 'name') AS label_name,
       JSONExtractString(payload, 'sender', 'login') AS sender_login
FROM webhook_deliveries FINAL
WHERE event = 'issues' AND action IN ('labeled', 'unlabeled');

CREATE OR REPLACE VIEW default.pull_label_event AS
SELECT toDateTime64(received_at, 3, 'UTC') AS event_time, action, repo AS repo_name,
       JSONExtractInt(payload, 'pull_request', 'number') AS pr_number,
       JSONExtractString(payload, 'label', 'name') AS label_name,
       JSONExtractString(payload, 'sender', 'login') AS sender_login
FROM webhook_deliveries FINAL
WHERE event = 'pull_request' AND action IN ('labeled', 'unlabeled');

-- The HUD's other lookup views (secondary indexes there; views here).
CREATE OR REPLACE VIEW materialized_views.workflow_job_by_completed_at AS SELECT id, completed_at, head_sha FROM default.workflow_job;
CREATE OR REPLACE VIEW materialized_views.workflow_run_by_pr_num AS
SELECT id, pr.number AS pr_number FROM default.workflow_run ARRAY JOIN pull_requests AS pr;
CREATE OR REPLACE VIEW materialized_views.push_by_sha AS SELECT head_commit.id AS id, head_commit.timestamp AS timestamp FROM default.push;
CREATE OR REPLACE VIEW materialized_views.pr_by_sha AS SELECT head.sha AS head_sha, number FROM default.pull_request;

-- The test tables, from relay's per-test results (test_results, one row
-- per test case of an uploaded report): a case's outcome as the HUD's
-- failure/error/skipped arrays (one element with relay's message) and its
-- reruns as that many rerun elements (relay keeps their count, not their
-- text). job_id is the job's HUD id (as default.failed_test_runs); the
-- invoking file is the file. default.test_run_summary and
-- tests.all_test_runs are the same rows.
CREATE DATABASE IF NOT EXISTS tests;

CREATE OR REPLACE VIEW default.test_run_s3 AS
SELECT
  name, classname, file, file AS invoking_file,
  relay_hud_job_id(job_id) AS job_id,
  toInt64OrZero(run_id) AS workflow_id,
  toInt32(greatest(toUInt32OrZero(run_attempt), 1)) AS workflow_run_attempt,
  duration AS time,
  CAST(if(outcome = 'failed', [(message, message, 'failure')], []), 'Array(Tuple(message String, text String, type String))') AS failure,
  CAST(if(outcome = 'error', [(message, message, 'error')], []), 'Array(Tuple(message String, text String, type String))') AS error,
  CAST(if(outcome = 'skipped', [(message, message, 'skipped')], []), 'Array(Tuple(message String, text String, type String))') AS skipped,
  CAST(arrayMap(i -> ('', '', 'rerun'), range(reruns)), 'Array(Tuple(message String, text String, type String))') AS rerun,
  toUInt64(outcome = 'failed') AS failure_count,
  toUInt64(outcome = 'error') AS error_count,
  toUInt64(outcome = 'skipped') AS skipped_count,
  toUInt64(reruns) AS rerun_count,
  toDateTime64(uploaded_at, 9, 'UTC') AS time_inserted,
  repo AS repository_full_name
FROM test_results FINAL;

CREATE OR REPLACE VIEW default.test_run_summary AS SELECT * FROM default.test_run_s3;
CREATE OR REPLACE VIEW tests.all_test_runs AS SELECT * FROM default.test_run_s3;

-- Every test name seen, with its last run (as an aggregate state: the HUD
-- reads it with maxMerge).
CREATE OR REPLACE VIEW tests.distinct_names AS
SELECT name, classname, file, file AS invoking_file, maxState(toDateTime64(uploaded_at, 9, 'UTC')) AS last_run
FROM test_results FINAL
GROUP BY name, classname, file;

-- Runner cost, from relay-lifecycle's usage events (cluster_events, kind
-- usage, per node group): one row per node group and usage interval, its
-- node-seconds as duration. Relay knows no prices: cost is 0, so the cost
-- pages (which keep cost > 0) show nothing and the duration pages show
-- relay's node-seconds. owning_account and group_repo are the cluster's
-- team (relay's clusters belong to teams, not repositories), runner_type
-- and instance_type its node group.
CREATE OR REPLACE VIEW misc.runner_cost AS
SELECT
  toDateTime64(at, 9, 'UTC') AS date,
  toFloat64(0) AS cost,
  node_seconds AS duration,
  team AS owning_account,
  team AS group_repo,
  provider,
  node_group AS runner_type,
  node_group AS instance_type,
  toUInt8(0) AS gpu,
  '' AS os,
  '' AS job_name,
  '' AS workflow_name,
  cluster_id,
  event_id
FROM cluster_events FINAL
WHERE kind = 'usage' AND node_group != '';
