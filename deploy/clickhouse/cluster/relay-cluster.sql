-- relay's schema on a ClickHouse cluster: what `relay-stats migrate` applies when
-- stats.clickhouse.cluster is set (each migration's statements made into their cluster
-- form as they are applied; services/stats/src/cluster_schema.cc). Printed by
-- `relay-stats cluster-schema` (tools/clickhouse/cluster-variant print); do not edit.
-- Needs the cluster in remote_servers with the {shard} and {replica} macros, and
-- ZooKeeper or ClickHouse Keeper. The ledger, schema_migrations, is made the same way.
-- docs/capacity.md explains the layout.
CREATE DATABASE IF NOT EXISTS relay ON CLUSTER '{cluster}';

-- 0001_tables.sql
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

-- 0002_rollups.sql
CREATE TABLE IF NOT EXISTS relay.rollup_marks_local ON CLUSTER '{cluster}' (
  kind String,
  day Date,
  repo String,
  marked_at_ms UInt64
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/relay/rollup_marks_local', '{replica}', marked_at_ms)
PARTITION BY toYYYYMM(day) ORDER BY (kind, day, repo);
CREATE TABLE IF NOT EXISTS relay.rollup_marks ON CLUSTER '{cluster}' AS relay.rollup_marks_local
ENGINE = Distributed('{cluster}', relay, rollup_marks_local, cityHash64(repo, day));
CREATE TABLE IF NOT EXISTS relay.rollup_state_local ON CLUSTER '{cluster}' (
  kind String,
  day Date,
  repo String,
  computed_from_ms UInt64
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/relay/rollup_state_local', '{replica}', computed_from_ms)
PARTITION BY toYYYYMM(day) ORDER BY (kind, day, repo);
CREATE TABLE IF NOT EXISTS relay.rollup_state ON CLUSTER '{cluster}' AS relay.rollup_state_local
ENGINE = Distributed('{cluster}', relay, rollup_state_local, cityHash64(repo, day));
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

-- 0003_rollup_snapshots.sql
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

-- 0004_hud.sql (requires ClickHouse >= 23.3)
CREATE DATABASE IF NOT EXISTS materialized_views ON CLUSTER '{cluster}';
CREATE DATABASE IF NOT EXISTS misc ON CLUSTER '{cluster}';
CREATE OR REPLACE FUNCTION relay_hud_job_id ON CLUSTER '{cluster}' AS (job_id) ->
  toInt64(reinterpretAsUInt64(reverse(unhex(concat('0', substring(lower(job_id), 1, 15))))));
CREATE OR REPLACE VIEW default.workflow_job ON CLUSTER '{cluster}' AS
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
    r.event AS workflow_event
  FROM workflow_job AS j FINAL
  LEFT JOIN (SELECT id, argMax(event, run_attempt) AS event FROM workflow_run FINAL GROUP BY id) AS r ON r.id = j.run_id
  UNION ALL
  SELECT
    relay_hud_job_id(c.id), toInt64OrZero(c.run_id), toInt64(greatest(toUInt32OrZero(c.run_attempt), 1)),
    if(c.job_name = '', c.workflow_name, c.job_name), c.workflow_name, c.head_sha, '',
    c.status, if(c.status = 'completed', c.conclusion, ''), c.workflow_run_url, c.downstream_repo,
    c.dispatched_at, c.started_at, c.completed_at,
    [], 0, '', '',
    [], [], [], [], [], [],
    c.event_type
  FROM crcr_workflow_job AS c FINAL
);
CREATE OR REPLACE VIEW default.workflow_run ON CLUSTER '{cluster}' AS
WITH JSONExtract(payload, 'workflow_run',
  'Tuple(artifacts_url String,
         head_commit Tuple(author Tuple(email String, name String), committer Tuple(email String, name String), id String, message String, timestamp DateTime64(9, \'UTC\'), tree_id String),
         repository Tuple(owner Tuple(login String)), head_repository Tuple(owner Tuple(login String)),
         actor Tuple(id Int64, login String, type String), triggering_actor Tuple(id Int64, login String, type String),
         pull_requests Array(Tuple(base Tuple(ref String, repo Tuple(id Int64, name String, url String), sha String), head Tuple(ref String, repo Tuple(id Int64, name String, url String), sha String), id Int64, number Int64, url String)))') AS p
SELECT
  id, name, head_sha, head_branch, event, status, conclusion, html_url,
  p.artifacts_url AS artifacts_url,
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
CREATE OR REPLACE VIEW default.push ON CLUSTER '{cluster}' AS
WITH JSONExtract(payload,
  'Tuple(ref String, before String, after String, forced Bool,
         head_commit Tuple(id String, message String, timestamp DateTime64(9, \'UTC\'), tree_id String, author Tuple(email String, name String, username String)),
         repository Tuple(full_name String, name String, owner Tuple(name String, login String)))') AS p
SELECT p.ref AS ref, p.before AS before, p.after AS after, p.forced AS forced, p.head_commit AS head_commit,
       p.repository AS repository, delivery_id AS dynamoKey
FROM webhook_deliveries FINAL
WHERE event = 'push';
CREATE OR REPLACE VIEW default.pull_request ON CLUSTER '{cluster}' AS
WITH JSONExtract(payload, 'pull_request',
  'Tuple(number Int64, title String, state String, html_url String, created_at String, updated_at String,
         closed_at String, merged_at String, labels Array(Tuple(name String)), head Tuple(ref String, sha String),
         base Tuple(ref String, sha String), user Tuple(login String))') AS p
SELECT p.number AS number, p.title AS title, p.state AS state, p.html_url AS html_url, p.created_at AS created_at,
       p.updated_at AS updated_at, p.closed_at AS closed_at, p.merged_at AS merged_at, p.labels AS labels,
       p.head AS head, p.base AS base, p.user AS user,
       repo AS repository_full_name, concat(repo, '/', toString(number)) AS dynamoKey
FROM webhook_deliveries FINAL
WHERE event = 'pull_request'
ORDER BY received_at_ms DESC
LIMIT 1 BY repo, number;
CREATE OR REPLACE VIEW default.issues ON CLUSTER '{cluster}' AS
WITH JSONExtract(payload, 'issue',
  'Tuple(number Int64, title String, state String, html_url String, body String, created_at String, updated_at String,
         closed_at String, assignee Tuple(login String), labels Array(Tuple(name String)), user Tuple(login String))') AS i
SELECT i.number AS number, i.title AS title, i.state AS state, i.html_url AS html_url, i.body AS body,
       i.created_at AS created_at, i.updated_at AS updated_at, i.closed_at AS closed_at, i.assignee AS assignee,
       i.labels AS labels, i.user AS user,
       repo AS repository_full_name, concat(repo, '/', toString(number)) AS dynamoKey
FROM webhook_deliveries FINAL
WHERE event = 'issues'
ORDER BY received_at_ms DESC
LIMIT 1 BY repo, number;
CREATE OR REPLACE VIEW misc.disabled_tests_historical ON CLUSTER '{cluster}' AS
WITH JSONExtract(payload, 'issue', 'Tuple(number Int64, title String, body String)') AS i
SELECT
  toDate(received_at) AS day,
  received_at AS timestamp,
  trim(substring(i.title, 10)) AS name,
  toInt32(i.number) AS issueNumber,
  arrayFilter(x -> x != '', arrayMap(x -> lower(trim(x)), splitByChar(',', extract(i.body, '(?mi)^\\s*platforms:\\s*([^\\r\\n]*)')))) AS platforms
FROM webhook_deliveries FINAL
WHERE event = 'issues' AND startsWith(i.title, 'DISABLED ');
CREATE OR REPLACE VIEW default.crcr_workflow_job ON CLUSTER '{cluster}' AS
SELECT
  concat(downstream_repo, '/', id) AS dynamoKey,
  status,
  downstream_repo,
  upstream_repo,
  toUInt64(greatest(pr_number, 0)) AS pr_number,
  head_sha AS pytorch_head_sha,
  delivery_id,
  workflow_run_url,
  workflow_name,
  job_name,
  check_run_id,
  run_id,
  toUInt32(greatest(toUInt32OrZero(run_attempt), 1)) AS run_attempt,
  conclusion,
  queue_time,
  execution_time,
  toDateTime64(started_at, 9, 'UTC') AS started_at,
  toDateTime64(completed_at, 9, 'UTC') AS completed_at,
  toUInt64(total_tests) AS total_tests,
  toUInt64(passed_tests) AS passed_tests,
  toUInt64(failed_tests) AS failed_tests,
  toUInt64(skipped_tests) AS skipped_tests,
  if(empty(failed_test_names), '', toJSONString(failed_test_names)) AS failed_tests_json,
  artifact_url,
  '' AS environment,
  if(downstream_repo_level = 0, '', concat('L', toString(downstream_repo_level))) AS downstream_repo_level,
  event_type,
  downstream_repo AS repository_full_name,
  if(completed_at = toDateTime(0), 0., toFloat64(dateDiff('second', started_at, completed_at))) AS duration_seconds
FROM crcr_workflow_job FINAL;
CREATE OR REPLACE VIEW default.failed_test_runs ON CLUSTER '{cluster}' AS
SELECT
  name,
  classname,
  file,
  file AS invoking_file,
  relay_hud_job_id(job_id) AS job_id,
  toInt64OrZero(run_id) AS workflow_id,
  toInt32(greatest(toUInt32OrZero(run_attempt), 1)) AS workflow_run_attempt,
  toFloat32(duration) AS time,
  outcome AS status,
  message,
  toDateTime64(uploaded_at, 9, 'UTC') AS time_inserted
FROM test_results FINAL
WHERE outcome IN ('failed', 'error');
CREATE TABLE IF NOT EXISTS default.job_annotation_local ON CLUSTER '{cluster}' (
  jobID Int64,
  repo String,
  annotation String,
  author String,
  updated_at DateTime64(9, 'UTC')
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/default/job_annotation_local', '{replica}', updated_at)
ORDER BY (jobID);
CREATE TABLE IF NOT EXISTS default.job_annotation ON CLUSTER '{cluster}' AS default.job_annotation_local
ENGINE = Distributed('{cluster}', default, job_annotation_local, cityHash64(jobID));
CREATE OR REPLACE VIEW materialized_views.workflow_job_by_head_sha ON CLUSTER '{cluster}' AS SELECT id, head_sha FROM default.workflow_job;
CREATE OR REPLACE VIEW materialized_views.workflow_job_by_created_at ON CLUSTER '{cluster}' AS SELECT id, created_at FROM default.workflow_job;
CREATE OR REPLACE VIEW materialized_views.workflow_run_by_head_sha ON CLUSTER '{cluster}' AS SELECT id, head_sha FROM default.workflow_run;
CREATE OR REPLACE VIEW materialized_views.workflow_run_by_created_at ON CLUSTER '{cluster}' AS SELECT id, created_at FROM default.workflow_run;
CREATE OR REPLACE VIEW materialized_views.workflow_run_by_run_started_at ON CLUSTER '{cluster}' AS SELECT id, run_started_at FROM default.workflow_run;
CREATE TABLE IF NOT EXISTS default.queue_times_historical_local ON CLUSTER '{cluster}' (
  time DateTime64(9, 'UTC'),
  avg_queue_s Int64,
  machine_type String,
  count Int64
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/default/queue_times_historical_local', '{replica}')
ORDER BY (machine_type, time);
CREATE TABLE IF NOT EXISTS default.queue_times_historical ON CLUSTER '{cluster}' AS default.queue_times_historical_local
ENGINE = Distributed('{cluster}', default, queue_times_historical_local, cityHash64(machine_type, time));
