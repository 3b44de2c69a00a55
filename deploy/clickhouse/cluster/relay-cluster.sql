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

-- 0005_superseded_dispatches.sql
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

-- 0006_hud_pages.sql (requires ClickHouse >= 23.3)
CREATE DATABASE IF NOT EXISTS benchmark ON CLUSTER '{cluster}';
CREATE DATABASE IF NOT EXISTS vllm ON CLUSTER '{cluster}';
CREATE OR REPLACE VIEW materialized_views.workflow_job_by_started_at ON CLUSTER '{cluster}' AS SELECT id, started_at FROM default.workflow_job;
CREATE TABLE IF NOT EXISTS misc.ai_advisor_dispatches_local ON CLUSTER '{cluster}' (
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
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/misc/ai_advisor_dispatches_local', '{replica}', version)
ORDER BY (owner, repo, head_sha, signal_key);
CREATE TABLE IF NOT EXISTS misc.ai_advisor_dispatches ON CLUSTER '{cluster}' AS misc.ai_advisor_dispatches_local
ENGINE = Distributed('{cluster}', misc, ai_advisor_dispatches_local, cityHash64(owner, repo, head_sha, signal_key));
CREATE TABLE IF NOT EXISTS misc.autorevert_advisor_verdicts_local ON CLUSTER '{cluster}' (
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
) ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/misc/autorevert_advisor_verdicts_local', '{replica}')
ORDER BY (repo, suspect_commit, signal_key, timestamp);
CREATE TABLE IF NOT EXISTS misc.autorevert_advisor_verdicts ON CLUSTER '{cluster}' AS misc.autorevert_advisor_verdicts_local
ENGINE = Distributed('{cluster}', misc, autorevert_advisor_verdicts_local, cityHash64(repo, suspect_commit, signal_key, timestamp));
CREATE TABLE IF NOT EXISTS misc.autorevert_events_v2_local ON CLUSTER '{cluster}' (
  ts DateTime DEFAULT now(),
  repo LowCardinality(String) DEFAULT 'pytorch/pytorch',
  action Enum8('none' = 0, 'restart' = 1, 'revert' = 2, 'advisor' = 3),
  commit_sha FixedString(40),
  workflows Array(String),
  source_signal_keys Array(String),
  dry_run UInt8 DEFAULT 0,
  failed UInt8 DEFAULT 0,
  notes String DEFAULT ''
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/misc/autorevert_events_v2_local', '{replica}')
PARTITION BY toYYYYMM(ts) ORDER BY (repo, commit_sha, action, ts);
CREATE TABLE IF NOT EXISTS misc.autorevert_events_v2 ON CLUSTER '{cluster}' AS misc.autorevert_events_v2_local
ENGINE = Distributed('{cluster}', misc, autorevert_events_v2_local, cityHash64(repo, commit_sha, action, ts));
CREATE TABLE IF NOT EXISTS misc.autorevert_state_local ON CLUSTER '{cluster}' (
  ts DateTime DEFAULT now(),
  repo LowCardinality(String) DEFAULT 'pytorch/pytorch',
  state String,
  dry_run UInt8 DEFAULT 0,
  workflows Array(String),
  lookback_hours UInt16,
  params String DEFAULT ''
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/misc/autorevert_state_local', '{replica}')
PARTITION BY toYYYYMM(ts) ORDER BY (repo, ts, dry_run);
CREATE TABLE IF NOT EXISTS misc.autorevert_state ON CLUSTER '{cluster}' AS misc.autorevert_state_local
ENGINE = Distributed('{cluster}', misc, autorevert_state_local, cityHash64(repo, ts, dry_run));
CREATE TABLE IF NOT EXISTS misc.claude_code_usage_local ON CLUSTER '{cluster}' (
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
) ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/misc/claude_code_usage_local', '{replica}')
ORDER BY (repo, timestamp, run_id);
CREATE TABLE IF NOT EXISTS misc.claude_code_usage ON CLUSTER '{cluster}' AS misc.claude_code_usage_local
ENGINE = Distributed('{cluster}', misc, claude_code_usage_local, cityHash64(repo, timestamp, run_id));
CREATE TABLE IF NOT EXISTS benchmark.oss_ci_benchmark_v3_local ON CLUSTER '{cluster}' (
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
) ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/benchmark/oss_ci_benchmark_v3_local', '{replica}')
ORDER BY (timestamp, head_branch, head_sha, workflow_id, job_id, servicelab_experiment_id, servicelab_trial_id);
CREATE TABLE IF NOT EXISTS benchmark.oss_ci_benchmark_v3 ON CLUSTER '{cluster}' AS benchmark.oss_ci_benchmark_v3_local
ENGINE = Distributed('{cluster}', benchmark, oss_ci_benchmark_v3_local, cityHash64(timestamp, head_branch, head_sha, workflow_id, job_id, servicelab_experiment_id, servicelab_trial_id));
CREATE TABLE IF NOT EXISTS benchmark.oss_ci_benchmark_metadata_local ON CLUSTER '{cluster}' (
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
) ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/benchmark/oss_ci_benchmark_metadata_local', '{replica}')
ORDER BY (repo, benchmark_name, benchmark_dtype, benchmark_mode, model_name, model_backend, device, arch, metric_name, head_branch, workflow_id, timestamp);
CREATE TABLE IF NOT EXISTS benchmark.oss_ci_benchmark_metadata ON CLUSTER '{cluster}' AS benchmark.oss_ci_benchmark_metadata_local
ENGINE = Distributed('{cluster}', benchmark, oss_ci_benchmark_metadata_local, cityHash64(repo, benchmark_name, benchmark_dtype, benchmark_mode, model_name, model_backend, device, arch, metric_name, head_branch, workflow_id, timestamp));
CREATE TABLE IF NOT EXISTS benchmark.oss_ci_benchmark_torchinductor_local ON CLUSTER '{cluster}' (
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
) ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/benchmark/oss_ci_benchmark_torchinductor_local', '{replica}')
ORDER BY (device, arch, model_name, metric_name, benchmark_dtype, benchmark_mode, head_branch, workflow_id, timestamp);
CREATE TABLE IF NOT EXISTS benchmark.oss_ci_benchmark_torchinductor ON CLUSTER '{cluster}' AS benchmark.oss_ci_benchmark_torchinductor_local
ENGINE = Distributed('{cluster}', benchmark, oss_ci_benchmark_torchinductor_local, cityHash64(device, arch, model_name, metric_name, benchmark_dtype, benchmark_mode, head_branch, workflow_id, timestamp));
CREATE TABLE IF NOT EXISTS vllm.vllm_buildkite_jobs_local ON CLUSTER '{cluster}' (
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
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/vllm/vllm_buildkite_jobs_local', '{replica}')
ORDER BY (pipeline.repository, pipeline.name, build.number, job.created_at, job.id, dynamoKey);
CREATE TABLE IF NOT EXISTS vllm.vllm_buildkite_jobs ON CLUSTER '{cluster}' AS vllm.vllm_buildkite_jobs_local
ENGINE = Distributed('{cluster}', vllm, vllm_buildkite_jobs_local, cityHash64(pipeline.repository, pipeline.name, build.number, job.created_at, job.id, dynamoKey));
CREATE TABLE IF NOT EXISTS vllm.vllm_buildkite_builds_local ON CLUSTER '{cluster}' (
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
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/vllm/vllm_buildkite_builds_local', '{replica}')
ORDER BY (pipeline.repository, pipeline.name, build.number, dynamoKey);
CREATE TABLE IF NOT EXISTS vllm.vllm_buildkite_builds ON CLUSTER '{cluster}' AS vllm.vllm_buildkite_builds_local
ENGINE = Distributed('{cluster}', vllm, vllm_buildkite_builds_local, cityHash64(pipeline.repository, pipeline.name, build.number, dynamoKey));
CREATE TABLE IF NOT EXISTS misc.oss_ci_queue_time_histogram_local ON CLUSTER '{cluster}' (
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
) ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/misc/oss_ci_queue_time_histogram_local', '{replica}')
PARTITION BY toYYYYMM(created_at) ORDER BY (job_name, workflow_name, machine_type, time_stamp, repo, type);
CREATE TABLE IF NOT EXISTS misc.oss_ci_queue_time_histogram ON CLUSTER '{cluster}' AS misc.oss_ci_queue_time_histogram_local
ENGINE = Distributed('{cluster}', misc, oss_ci_queue_time_histogram_local, cityHash64(job_name, workflow_name, machine_type, time_stamp, repo, type));
CREATE TABLE IF NOT EXISTS misc.oss_ci_utilization_metadata_local ON CLUSTER '{cluster}' (
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
) ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/misc/oss_ci_utilization_metadata_local', '{replica}')
PARTITION BY toYYYYMM(start_at) ORDER BY (workflow_id, job_id, repo, workflow_name, job_name, start_at);
CREATE TABLE IF NOT EXISTS misc.oss_ci_utilization_metadata ON CLUSTER '{cluster}' AS misc.oss_ci_utilization_metadata_local
ENGINE = Distributed('{cluster}', misc, oss_ci_utilization_metadata_local, cityHash64(workflow_id, job_id, repo, workflow_name, job_name, start_at));
CREATE TABLE IF NOT EXISTS misc.oss_ci_time_series_local ON CLUSTER '{cluster}' (
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
) ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/misc/oss_ci_time_series_local', '{replica}')
PARTITION BY toYYYYMM(time_stamp) ORDER BY (workflow_id, job_id, repo, workflow_name, job_name, type, time_stamp);
CREATE TABLE IF NOT EXISTS misc.oss_ci_time_series ON CLUSTER '{cluster}' AS misc.oss_ci_time_series_local
ENGINE = Distributed('{cluster}', misc, oss_ci_time_series_local, cityHash64(workflow_id, job_id, repo, workflow_name, job_name, type, time_stamp));
CREATE TABLE IF NOT EXISTS misc.oss_ci_utilization_summary_report_v1_local ON CLUSTER '{cluster}' (
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
) ENGINE = ReplicatedAggregatingMergeTree('/clickhouse/tables/{shard}/misc/oss_ci_utilization_summary_report_v1_local', '{replica}')
ORDER BY (report_type, time, group_key, parent_group);
CREATE TABLE IF NOT EXISTS misc.oss_ci_utilization_summary_report_v1 ON CLUSTER '{cluster}' AS misc.oss_ci_utilization_summary_report_v1_local
ENGINE = Distributed('{cluster}', misc, oss_ci_utilization_summary_report_v1_local, cityHash64(report_type, time, group_key, parent_group));
CREATE TABLE IF NOT EXISTS benchmark.torchbench_userbenchmark_local ON CLUSTER '{cluster}' (
  name String,
  environ String,
  metrics String,
  timestamp DateTime64(3, 'UTC')
) ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/benchmark/torchbench_userbenchmark_local', '{replica}')
ORDER BY (name, timestamp);
CREATE TABLE IF NOT EXISTS benchmark.torchbench_userbenchmark ON CLUSTER '{cluster}' AS benchmark.torchbench_userbenchmark_local
ENGINE = Distributed('{cluster}', benchmark, torchbench_userbenchmark_local, cityHash64(name, timestamp));
CREATE TABLE IF NOT EXISTS misc.external_contribution_stats_local ON CLUSTER '{cluster}' (
  date Date,
  pr_count UInt32,
  user_count UInt32,
  users Array(String)
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/misc/external_contribution_stats_local', '{replica}')
ORDER BY date;
CREATE TABLE IF NOT EXISTS misc.external_contribution_stats ON CLUSTER '{cluster}' AS misc.external_contribution_stats_local
ENGINE = Distributed('{cluster}', misc, external_contribution_stats_local, cityHash64(date));
CREATE TABLE IF NOT EXISTS misc.queue_times_24h_stats_local ON CLUSTER '{cluster}' (
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
) ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/misc/queue_times_24h_stats_local', '{replica}')
ORDER BY (machine_type, time);
CREATE TABLE IF NOT EXISTS misc.queue_times_24h_stats ON CLUSTER '{cluster}' AS misc.queue_times_24h_stats_local
ENGINE = Distributed('{cluster}', misc, queue_times_24h_stats_local, cityHash64(machine_type, time));
CREATE TABLE IF NOT EXISTS misc.stable_pushes_local ON CLUSTER '{cluster}' (
  repository String,
  sha String,
  timestamp DateTime64(9, 'UTC')
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/misc/stable_pushes_local', '{replica}')
ORDER BY (repository, sha);
CREATE TABLE IF NOT EXISTS misc.stable_pushes ON CLUSTER '{cluster}' AS misc.stable_pushes_local
ENGINE = Distributed('{cluster}', misc, stable_pushes_local, cityHash64(repository, sha));
CREATE TABLE IF NOT EXISTS default.merge_bases_local ON CLUSTER '{cluster}' (
  repo String,
  sha String,
  merge_base String,
  merge_base_commit_date DateTime64(3, 'UTC'),
  changed_files Array(String)
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/default/merge_bases_local', '{replica}')
ORDER BY (repo, sha);
CREATE TABLE IF NOT EXISTS default.merge_bases ON CLUSTER '{cluster}' AS default.merge_bases_local
ENGINE = Distributed('{cluster}', default, merge_bases_local, cityHash64(repo, sha));
CREATE TABLE IF NOT EXISTS default.rerun_disabled_tests_local ON CLUSTER '{cluster}' (
  name String,
  classname String,
  filename String,
  flaky Bool,
  num_green Int64,
  num_red Int64,
  workflow_id Int64,
  job_id Int64
) ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/default/rerun_disabled_tests_local', '{replica}')
ORDER BY (name, classname, filename, workflow_id);
CREATE TABLE IF NOT EXISTS default.rerun_disabled_tests ON CLUSTER '{cluster}' AS default.rerun_disabled_tests_local
ENGINE = Distributed('{cluster}', default, rerun_disabled_tests_local, cityHash64(name, classname, filename, workflow_id));
CREATE OR REPLACE VIEW default.merges ON CLUSTER '{cluster}' AS
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
    min(c.dispatched_at) OVER (PARTITION BY c.downstream_repo, c.run_id),
    greatest(c.dispatched_at, c.started_at, c.completed_at)
  FROM crcr_workflow_job AS c FINAL
);
CREATE OR REPLACE VIEW default.workflow_run ON CLUSTER '{cluster}' AS
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
CREATE OR REPLACE VIEW default.push ON CLUSTER '{cluster}' AS
WITH JSONExtract(payload,
  'Tuple(ref String, before String, after String, forced Bool, compare String,
         head_commit Tuple(id String, message String, timestamp DateTime64(9, \'UTC\'), tree_id String, url String, author Tuple(email String, name String, username String)),
         commits Array(Tuple(id String, message String, timestamp DateTime64(9, \'UTC\'), tree_id String, url String, author Tuple(email String, name String, username String), added Array(String), removed Array(String), modified Array(String))),
         repository Tuple(full_name String, name String, owner Tuple(name String, login String)))') AS p
SELECT p.ref AS ref, p.before AS before, p.after AS after, p.forced AS forced, p.compare AS compare,
       p.head_commit AS head_commit, p.commits AS commits, p.repository AS repository, delivery_id AS dynamoKey
FROM webhook_deliveries FINAL
WHERE event = 'push';
CREATE OR REPLACE VIEW default.pull_request ON CLUSTER '{cluster}' AS
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
CREATE OR REPLACE VIEW default.issues ON CLUSTER '{cluster}' AS
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
CREATE OR REPLACE VIEW default.issue_comment ON CLUSTER '{cluster}' AS
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
CREATE OR REPLACE VIEW default.pull_request_review ON CLUSTER '{cluster}' AS
WITH JSONExtract(payload, 'review',
  'Tuple(id Int64, state String, body String, html_url String, pull_request_url String, author_association String,
         submitted_at Nullable(DateTime64(9, \'UTC\')), user Tuple(login String))') AS r
SELECT r AS review, JSONExtractString(payload, 'action') AS action,
       concat(repo, '/', toString(r.id)) AS dynamoKey
FROM webhook_deliveries FINAL
WHERE event = 'pull_request_review'
ORDER BY received_at_ms DESC, delivery_id
LIMIT 1 BY repo, tupleElement(r, 'id');
CREATE OR REPLACE VIEW default.issues_label_event ON CLUSTER '{cluster}' AS
SELECT toDateTime64(received_at, 3, 'UTC') AS event_time, action, repo AS repo_name,
       JSONExtractInt(payload, 'issue', 'number') AS issue_number,
       JSONExtractString(payload, 'label', 'name') AS label_name,
       JSONExtractString(payload, 'sender', 'login') AS sender_login
FROM webhook_deliveries FINAL
WHERE event = 'issues' AND action IN ('labeled', 'unlabeled');
CREATE OR REPLACE VIEW default.pull_label_event ON CLUSTER '{cluster}' AS
SELECT toDateTime64(received_at, 3, 'UTC') AS event_time, action, repo AS repo_name,
       JSONExtractInt(payload, 'pull_request', 'number') AS pr_number,
       JSONExtractString(payload, 'label', 'name') AS label_name,
       JSONExtractString(payload, 'sender', 'login') AS sender_login
FROM webhook_deliveries FINAL
WHERE event = 'pull_request' AND action IN ('labeled', 'unlabeled');
CREATE OR REPLACE VIEW materialized_views.workflow_job_by_completed_at ON CLUSTER '{cluster}' AS SELECT id, completed_at, head_sha FROM default.workflow_job;
CREATE OR REPLACE VIEW materialized_views.workflow_run_by_pr_num ON CLUSTER '{cluster}' AS
SELECT id, pr.number AS pr_number FROM default.workflow_run ARRAY JOIN pull_requests AS pr;
CREATE OR REPLACE VIEW materialized_views.push_by_sha ON CLUSTER '{cluster}' AS SELECT head_commit.id AS id, head_commit.timestamp AS timestamp FROM default.push;
CREATE OR REPLACE VIEW materialized_views.pr_by_sha ON CLUSTER '{cluster}' AS SELECT head.sha AS head_sha, number FROM default.pull_request;
CREATE DATABASE IF NOT EXISTS tests ON CLUSTER '{cluster}';
CREATE OR REPLACE VIEW default.test_run_s3 ON CLUSTER '{cluster}' AS
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
CREATE OR REPLACE VIEW default.test_run_summary ON CLUSTER '{cluster}' AS SELECT * FROM default.test_run_s3;
CREATE OR REPLACE VIEW tests.all_test_runs ON CLUSTER '{cluster}' AS SELECT * FROM default.test_run_s3;
CREATE OR REPLACE VIEW tests.distinct_names ON CLUSTER '{cluster}' AS
SELECT name, classname, file, file AS invoking_file, maxState(toDateTime64(uploaded_at, 9, 'UTC')) AS last_run
FROM test_results FINAL
GROUP BY name, classname, file;
CREATE OR REPLACE VIEW misc.runner_cost ON CLUSTER '{cluster}' AS
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

-- 0007_hud_columns.sql (requires ClickHouse >= 23.3)
-- on one replica of each shard:
ALTER TABLE relay.webhook_deliveries_local ADD COLUMN IF NOT EXISTS hud_workflow_run
  Tuple(artifacts_url String, path String,
         head_commit Tuple(author Tuple(email String, name String), committer Tuple(email String, name String), id String, message String, timestamp DateTime64(9, 'UTC'), tree_id String),
         repository Tuple(owner Tuple(login String)), head_repository Tuple(owner Tuple(login String)),
         actor Tuple(id Int64, login String, type String), triggering_actor Tuple(id Int64, login String, type String),
         pull_requests Array(Tuple(base Tuple(ref String, repo Tuple(id Int64, name String, url String), sha String), head Tuple(ref String, repo Tuple(id Int64, name String, url String), sha String), id Int64, number Int64, url String)))
  MATERIALIZED JSONExtract(if(event = 'workflow_run', payload, ''), 'workflow_run', 'Tuple(artifacts_url String, path String,
         head_commit Tuple(author Tuple(email String, name String), committer Tuple(email String, name String), id String, message String, timestamp DateTime64(9, \'UTC\'), tree_id String),
         repository Tuple(owner Tuple(login String)), head_repository Tuple(owner Tuple(login String)),
         actor Tuple(id Int64, login String, type String), triggering_actor Tuple(id Int64, login String, type String),
         pull_requests Array(Tuple(base Tuple(ref String, repo Tuple(id Int64, name String, url String), sha String), head Tuple(ref String, repo Tuple(id Int64, name String, url String), sha String), id Int64, number Int64, url String)))');
ALTER TABLE relay.webhook_deliveries ON CLUSTER '{cluster}' ADD COLUMN IF NOT EXISTS hud_workflow_run
  Tuple(artifacts_url String, path String,
         head_commit Tuple(author Tuple(email String, name String), committer Tuple(email String, name String), id String, message String, timestamp DateTime64(9, 'UTC'), tree_id String),
         repository Tuple(owner Tuple(login String)), head_repository Tuple(owner Tuple(login String)),
         actor Tuple(id Int64, login String, type String), triggering_actor Tuple(id Int64, login String, type String),
         pull_requests Array(Tuple(base Tuple(ref String, repo Tuple(id Int64, name String, url String), sha String), head Tuple(ref String, repo Tuple(id Int64, name String, url String), sha String), id Int64, number Int64, url String)))
  MATERIALIZED JSONExtract(if(event = 'workflow_run', payload, ''), 'workflow_run', 'Tuple(artifacts_url String, path String,
         head_commit Tuple(author Tuple(email String, name String), committer Tuple(email String, name String), id String, message String, timestamp DateTime64(9, \'UTC\'), tree_id String),
         repository Tuple(owner Tuple(login String)), head_repository Tuple(owner Tuple(login String)),
         actor Tuple(id Int64, login String, type String), triggering_actor Tuple(id Int64, login String, type String),
         pull_requests Array(Tuple(base Tuple(ref String, repo Tuple(id Int64, name String, url String), sha String), head Tuple(ref String, repo Tuple(id Int64, name String, url String), sha String), id Int64, number Int64, url String)))');
-- on one replica of each shard:
ALTER TABLE relay.webhook_deliveries_local ADD COLUMN IF NOT EXISTS hud_push
  Tuple(ref String, before String, after String, forced Bool, compare String,
         head_commit Tuple(id String, message String, timestamp DateTime64(9, 'UTC'), tree_id String, url String, author Tuple(email String, name String, username String)),
         commits Array(Tuple(id String, message String, timestamp DateTime64(9, 'UTC'), tree_id String, url String, author Tuple(email String, name String, username String), added Array(String), removed Array(String), modified Array(String))),
         repository Tuple(full_name String, name String, owner Tuple(name String, login String)))
  MATERIALIZED JSONExtract(if(event = 'push', payload, ''), 'Tuple(ref String, before String, after String, forced Bool, compare String,
         head_commit Tuple(id String, message String, timestamp DateTime64(9, \'UTC\'), tree_id String, url String, author Tuple(email String, name String, username String)),
         commits Array(Tuple(id String, message String, timestamp DateTime64(9, \'UTC\'), tree_id String, url String, author Tuple(email String, name String, username String), added Array(String), removed Array(String), modified Array(String))),
         repository Tuple(full_name String, name String, owner Tuple(name String, login String)))');
ALTER TABLE relay.webhook_deliveries ON CLUSTER '{cluster}' ADD COLUMN IF NOT EXISTS hud_push
  Tuple(ref String, before String, after String, forced Bool, compare String,
         head_commit Tuple(id String, message String, timestamp DateTime64(9, 'UTC'), tree_id String, url String, author Tuple(email String, name String, username String)),
         commits Array(Tuple(id String, message String, timestamp DateTime64(9, 'UTC'), tree_id String, url String, author Tuple(email String, name String, username String), added Array(String), removed Array(String), modified Array(String))),
         repository Tuple(full_name String, name String, owner Tuple(name String, login String)))
  MATERIALIZED JSONExtract(if(event = 'push', payload, ''), 'Tuple(ref String, before String, after String, forced Bool, compare String,
         head_commit Tuple(id String, message String, timestamp DateTime64(9, \'UTC\'), tree_id String, url String, author Tuple(email String, name String, username String)),
         commits Array(Tuple(id String, message String, timestamp DateTime64(9, \'UTC\'), tree_id String, url String, author Tuple(email String, name String, username String), added Array(String), removed Array(String), modified Array(String))),
         repository Tuple(full_name String, name String, owner Tuple(name String, login String)))');
-- on one replica of each shard:
ALTER TABLE relay.webhook_deliveries_local ADD COLUMN IF NOT EXISTS hud_pull_request
  Tuple(number Int64, title String, body String, state String, draft Bool, merged Bool, html_url String,
         created_at String, updated_at String, closed_at String, merged_at String, merge_commit_sha String,
         author_association String, labels Array(Tuple(name String)), user Tuple(login String),
         merged_by Tuple(login String), auto_merge Tuple(merge_method String, enabled_by Tuple(login String)),
         head Tuple(ref String, sha String, repo Tuple(full_name String, name String)),
         base Tuple(ref String, sha String, repo Tuple(full_name String, name String)))
  MATERIALIZED JSONExtract(if(event = 'pull_request', payload, ''), 'pull_request', 'Tuple(number Int64, title String, body String, state String, draft Bool, merged Bool, html_url String,
         created_at String, updated_at String, closed_at String, merged_at String, merge_commit_sha String,
         author_association String, labels Array(Tuple(name String)), user Tuple(login String),
         merged_by Tuple(login String), auto_merge Tuple(merge_method String, enabled_by Tuple(login String)),
         head Tuple(ref String, sha String, repo Tuple(full_name String, name String)),
         base Tuple(ref String, sha String, repo Tuple(full_name String, name String)))');
ALTER TABLE relay.webhook_deliveries ON CLUSTER '{cluster}' ADD COLUMN IF NOT EXISTS hud_pull_request
  Tuple(number Int64, title String, body String, state String, draft Bool, merged Bool, html_url String,
         created_at String, updated_at String, closed_at String, merged_at String, merge_commit_sha String,
         author_association String, labels Array(Tuple(name String)), user Tuple(login String),
         merged_by Tuple(login String), auto_merge Tuple(merge_method String, enabled_by Tuple(login String)),
         head Tuple(ref String, sha String, repo Tuple(full_name String, name String)),
         base Tuple(ref String, sha String, repo Tuple(full_name String, name String)))
  MATERIALIZED JSONExtract(if(event = 'pull_request', payload, ''), 'pull_request', 'Tuple(number Int64, title String, body String, state String, draft Bool, merged Bool, html_url String,
         created_at String, updated_at String, closed_at String, merged_at String, merge_commit_sha String,
         author_association String, labels Array(Tuple(name String)), user Tuple(login String),
         merged_by Tuple(login String), auto_merge Tuple(merge_method String, enabled_by Tuple(login String)),
         head Tuple(ref String, sha String, repo Tuple(full_name String, name String)),
         base Tuple(ref String, sha String, repo Tuple(full_name String, name String)))');
-- on one replica of each shard:
ALTER TABLE relay.webhook_deliveries_local ADD COLUMN IF NOT EXISTS hud_issue
  Tuple(number Int64, title String, state String, html_url String, body String, created_at String, updated_at String,
         closed_at String, repository_url String, author_association String, assignee Tuple(login String),
         labels Array(Tuple(name String)), user Tuple(login String), pull_request Tuple(url String))
  MATERIALIZED JSONExtract(if(event = 'issues', payload, ''), 'issue', 'Tuple(number Int64, title String, state String, html_url String, body String, created_at String, updated_at String,
         closed_at String, repository_url String, author_association String, assignee Tuple(login String),
         labels Array(Tuple(name String)), user Tuple(login String), pull_request Tuple(url String))');
ALTER TABLE relay.webhook_deliveries ON CLUSTER '{cluster}' ADD COLUMN IF NOT EXISTS hud_issue
  Tuple(number Int64, title String, state String, html_url String, body String, created_at String, updated_at String,
         closed_at String, repository_url String, author_association String, assignee Tuple(login String),
         labels Array(Tuple(name String)), user Tuple(login String), pull_request Tuple(url String))
  MATERIALIZED JSONExtract(if(event = 'issues', payload, ''), 'issue', 'Tuple(number Int64, title String, state String, html_url String, body String, created_at String, updated_at String,
         closed_at String, repository_url String, author_association String, assignee Tuple(login String),
         labels Array(Tuple(name String)), user Tuple(login String), pull_request Tuple(url String))');
-- on one replica of each shard:
ALTER TABLE relay.webhook_deliveries_local ADD COLUMN IF NOT EXISTS hud_issue_comment
  Tuple(id Int64, body String, html_url String, issue_url String, author_association String,
         created_at DateTime64(9, 'UTC'), updated_at DateTime64(9, 'UTC'), user Tuple(login String, type String))
  MATERIALIZED JSONExtract(if(event = 'issue_comment', payload, ''), 'comment', 'Tuple(id Int64, body String, html_url String, issue_url String, author_association String,
         created_at DateTime64(9, \'UTC\'), updated_at DateTime64(9, \'UTC\'), user Tuple(login String, type String))');
ALTER TABLE relay.webhook_deliveries ON CLUSTER '{cluster}' ADD COLUMN IF NOT EXISTS hud_issue_comment
  Tuple(id Int64, body String, html_url String, issue_url String, author_association String,
         created_at DateTime64(9, 'UTC'), updated_at DateTime64(9, 'UTC'), user Tuple(login String, type String))
  MATERIALIZED JSONExtract(if(event = 'issue_comment', payload, ''), 'comment', 'Tuple(id Int64, body String, html_url String, issue_url String, author_association String,
         created_at DateTime64(9, \'UTC\'), updated_at DateTime64(9, \'UTC\'), user Tuple(login String, type String))');
-- on one replica of each shard:
ALTER TABLE relay.webhook_deliveries_local MATERIALIZE COLUMN hud_workflow_run;
ALTER TABLE relay.webhook_deliveries ON CLUSTER '{cluster}' MATERIALIZE COLUMN hud_workflow_run;
-- on one replica of each shard:
ALTER TABLE relay.webhook_deliveries_local MATERIALIZE COLUMN hud_push;
ALTER TABLE relay.webhook_deliveries ON CLUSTER '{cluster}' MATERIALIZE COLUMN hud_push;
-- on one replica of each shard:
ALTER TABLE relay.webhook_deliveries_local MATERIALIZE COLUMN hud_pull_request;
ALTER TABLE relay.webhook_deliveries ON CLUSTER '{cluster}' MATERIALIZE COLUMN hud_pull_request;
-- on one replica of each shard:
ALTER TABLE relay.webhook_deliveries_local MATERIALIZE COLUMN hud_issue;
ALTER TABLE relay.webhook_deliveries ON CLUSTER '{cluster}' MATERIALIZE COLUMN hud_issue;
-- on one replica of each shard:
ALTER TABLE relay.webhook_deliveries_local MATERIALIZE COLUMN hud_issue_comment;
ALTER TABLE relay.webhook_deliveries ON CLUSTER '{cluster}' MATERIALIZE COLUMN hud_issue_comment;
CREATE OR REPLACE VIEW default.push ON CLUSTER '{cluster}' AS
WITH hud_push AS p
SELECT p.ref AS ref, p.before AS before, p.after AS after, p.forced AS forced, p.compare AS compare,
       p.head_commit AS head_commit, p.commits AS commits, p.repository AS repository, delivery_id AS dynamoKey
FROM webhook_deliveries FINAL
WHERE event = 'push';
CREATE OR REPLACE VIEW default.pull_request ON CLUSTER '{cluster}' AS
WITH hud_pull_request AS p
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
CREATE OR REPLACE VIEW default.issues ON CLUSTER '{cluster}' AS
WITH hud_issue AS i
SELECT i.number AS number, i.title AS title, i.state AS state, i.html_url AS html_url, i.body AS body,
       i.created_at AS created_at, i.updated_at AS updated_at, i.closed_at AS closed_at,
       i.repository_url AS repository_url, i.author_association AS author_association, i.assignee AS assignee,
       i.labels AS labels, i.user AS user, i.pull_request AS pull_request,
       repo AS repository_full_name, concat(repo, '/', toString(number)) AS dynamoKey
FROM webhook_deliveries FINAL
WHERE event = 'issues'
ORDER BY received_at_ms DESC, delivery_id
LIMIT 1 BY repo, number;
CREATE OR REPLACE VIEW default.issue_comment ON CLUSTER '{cluster}' AS
WITH hud_issue_comment AS c
SELECT c.id AS id, c.body AS body, c.html_url AS html_url, c.issue_url AS issue_url,
       c.author_association AS author_association, c.created_at AS created_at, c.updated_at AS updated_at,
       c.user AS user, repo AS repository_full_name, concat(repo, '/', toString(c.id)) AS dynamoKey
FROM webhook_deliveries FINAL
WHERE event = 'issue_comment'
ORDER BY received_at_ms DESC, delivery_id
LIMIT 1 BY repo, id;
CREATE OR REPLACE VIEW default.workflow_run ON CLUSTER '{cluster}' AS
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
    w.p AS p
  FROM (SELECT * FROM workflow_run FINAL ORDER BY id, run_attempt DESC LIMIT 1 BY id) AS r
  LEFT JOIN (SELECT delivery_id, any(hud_workflow_run) AS p FROM webhook_deliveries FINAL
             WHERE event = 'workflow_run' GROUP BY delivery_id) AS w ON w.delivery_id = r.delivery_id
  UNION ALL
  SELECT
    toInt64OrZero(run_id), workflow_name, head_sha, '', event_type,
    if(completed, 'completed', 'in_progress'), if(completed, conclusion, ''), workflow_run_url,
    created, updated, started, toInt64(attempt), 0, 0,
    downstream_repo, downstream_repo,
    JSONExtract(if(pr_number > 0, toJSONString(CAST(tuple(tuple([(pr_number, tuple(head_sha))])),
                                        'Tuple(workflow_run Tuple(pull_requests Array(Tuple(number Int64, head Tuple(sha String)))))')), ''), 'workflow_run',
      'Tuple(artifacts_url String, path String,
         head_commit Tuple(author Tuple(email String, name String), committer Tuple(email String, name String), id String, message String, timestamp DateTime64(9, \'UTC\'), tree_id String),
         repository Tuple(owner Tuple(login String)), head_repository Tuple(owner Tuple(login String)),
         actor Tuple(id Int64, login String, type String), triggering_actor Tuple(id Int64, login String, type String),
         pull_requests Array(Tuple(base Tuple(ref String, repo Tuple(id Int64, name String, url String), sha String), head Tuple(ref String, repo Tuple(id Int64, name String, url String), sha String), id Int64, number Int64, url String)))')
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
CREATE OR REPLACE VIEW default.merges ON CLUSTER '{cluster}' AS
WITH hud_pull_request AS p
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
CREATE OR REPLACE VIEW misc.disabled_tests_historical ON CLUSTER '{cluster}' AS
WITH hud_issue AS i
SELECT
  toDate(received_at) AS day,
  received_at AS timestamp,
  trim(substring(i.title, 10)) AS name,
  toInt32(i.number) AS issueNumber,
  arrayFilter(x -> x != '', arrayMap(x -> lower(trim(x)), splitByChar(',', extract(i.body, '(?mi)^\\s*platforms:\\s*([^\\r\\n]*)')))) AS platforms
FROM webhook_deliveries FINAL
WHERE event = 'issues' AND startsWith(i.title, 'DISABLED ');

-- 0008_hud_tables.sql (requires ClickHouse >= 23.3)
CREATE TABLE IF NOT EXISTS relay.hud_deliveries_local ON CLUSTER '{cluster}' (
  delivery_id String,
  event String,
  action String,
  repo String,
  received_at DateTime,
  received_at_ms Int64,
  body_sha256 String,
  payload String,
  version UInt64,
  hud_push Tuple(ref String, before String, after String, forced Bool, compare String,
  head_commit Tuple(id String, message String, timestamp DateTime64(9, 'UTC'), tree_id String, url String, author Tuple(email String, name String, username String)),
  commits Array(Tuple(id String, message String, timestamp DateTime64(9, 'UTC'), tree_id String, url String, author Tuple(email String, name String, username String), added Array(String), removed Array(String), modified Array(String))),
  repository Tuple(full_name String, name String, owner Tuple(name String, login String))),
  hud_pull_request Tuple(number Int64, title String, body String, state String, draft Bool, merged Bool, html_url String,
  created_at String, updated_at String, closed_at String, merged_at String, merge_commit_sha String,
  author_association String, labels Array(Tuple(name String)), user Tuple(login String),
  merged_by Tuple(login String), auto_merge Tuple(merge_method String, enabled_by Tuple(login String)),
  head Tuple(ref String, sha String, repo Tuple(full_name String, name String)),
  base Tuple(ref String, sha String, repo Tuple(full_name String, name String))),
  hud_issue Tuple(number Int64, title String, state String, html_url String, body String, created_at String, updated_at String,
  closed_at String, repository_url String, author_association String, assignee Tuple(login String),
  labels Array(Tuple(name String)), user Tuple(login String), pull_request Tuple(url String)),
  hud_issue_comment Tuple(id Int64, body String, html_url String, issue_url String, author_association String,
  created_at DateTime64(9, 'UTC'), updated_at DateTime64(9, 'UTC'), user Tuple(login String, type String))
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/relay/hud_deliveries_local', '{replica}', version)
PARTITION BY toYYYYMM(received_at) ORDER BY (event, delivery_id, body_sha256);
CREATE TABLE IF NOT EXISTS relay.hud_deliveries ON CLUSTER '{cluster}' AS relay.hud_deliveries_local
ENGINE = Distributed('{cluster}', relay, hud_deliveries_local, cityHash64(delivery_id));
CREATE MATERIALIZED VIEW IF NOT EXISTS hud_deliveries_mv ON CLUSTER '{cluster}' TO hud_deliveries AS SELECT delivery_id, event, action, repo, received_at, received_at_ms, body_sha256, payload, version,
       hud_push, hud_pull_request, hud_issue, hud_issue_comment
FROM relay.webhook_deliveries_local
WHERE event IN ('push', 'pull_request', 'issues', 'issue_comment', 'pull_request_review');
INSERT INTO hud_deliveries
SELECT delivery_id, event, action, repo, received_at, received_at_ms, body_sha256, payload, version,
       hud_push, hud_pull_request, hud_issue, hud_issue_comment
FROM webhook_deliveries
WHERE event IN ('push', 'pull_request', 'issues', 'issue_comment', 'pull_request_review');
CREATE TABLE IF NOT EXISTS relay.hud_workflow_run_local ON CLUSTER '{cluster}' (
  id Int64,
  run_attempt Int64,
  run_number Int64,
  workflow_id Int64,
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
  p Tuple(artifacts_url String, path String,
  head_commit Tuple(author Tuple(email String, name String), committer Tuple(email String, name String), id String, message String, timestamp DateTime64(9, 'UTC'), tree_id String),
  repository Tuple(owner Tuple(login String)), head_repository Tuple(owner Tuple(login String)),
  actor Tuple(id Int64, login String, type String), triggering_actor Tuple(id Int64, login String, type String),
  pull_requests Array(Tuple(base Tuple(ref String, repo Tuple(id Int64, name String, url String), sha String), head Tuple(ref String, repo Tuple(id Int64, name String, url String), sha String), id Int64, number Int64, url String))),
  version UInt64,
  INDEX hud_created_at toDateTime64(created_at, 9, 'UTC') TYPE minmax GRANULARITY 1
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/relay/hud_workflow_run_local', '{replica}', version)
PARTITION BY toYYYYMM(created_at) ORDER BY id;
CREATE TABLE IF NOT EXISTS relay.hud_workflow_run ON CLUSTER '{cluster}' AS relay.hud_workflow_run_local
ENGINE = Distributed('{cluster}', relay, hud_workflow_run_local, cityHash64(id));
CREATE MATERIALIZED VIEW IF NOT EXISTS hud_workflow_run_mv ON CLUSTER '{cluster}' TO hud_workflow_run AS WITH JSONExtract(d.payload, 'workflow_run', 'Tuple(id Int64, run_attempt Int64, run_number Int64, workflow_id Int64,
       name String, event String, head_sha String, head_branch String, status String, conclusion String,
       created_at String, updated_at String, run_started_at String, html_url String,
       head_repository Tuple(full_name String))') AS r,
     parseDateTimeBestEffortOrZero(r.updated_at, 'UTC') AS updated
SELECT r.id AS id, greatest(r.run_attempt, 1) AS run_attempt, r.run_number AS run_number, r.workflow_id AS workflow_id,
       r.name AS name, r.event AS event, r.head_sha AS head_sha, r.head_branch AS head_branch, r.status AS status,
       r.conclusion AS conclusion, parseDateTimeBestEffortOrZero(r.created_at, 'UTC') AS created_at,
       updated AS updated_at, parseDateTimeBestEffortOrZero(r.run_started_at, 'UTC') AS run_started_at,
       r.html_url AS html_url, d.repo AS repository_full_name,
       lower(r.head_repository.full_name) AS head_repository_full_name, d.hud_workflow_run AS p,
       toUInt64(greatest(r.run_attempt, 1)) * 100000000000000
         + multiIf(r.status = 'completed', 3, r.status = 'in_progress', 2, 1) * 10000000000000
         + toUInt64(toUnixTimestamp(updated)) * 1000 AS version
FROM relay.webhook_deliveries_local AS d
WHERE d.event = 'workflow_run';
INSERT INTO hud_workflow_run
WITH JSONExtract(d.payload, 'workflow_run', 'Tuple(id Int64, run_attempt Int64, run_number Int64, workflow_id Int64,
       name String, event String, head_sha String, head_branch String, status String, conclusion String,
       created_at String, updated_at String, run_started_at String, html_url String,
       head_repository Tuple(full_name String))') AS r,
     parseDateTimeBestEffortOrZero(r.updated_at, 'UTC') AS updated
SELECT r.id AS id, greatest(r.run_attempt, 1) AS run_attempt, r.run_number AS run_number, r.workflow_id AS workflow_id,
       r.name AS name, r.event AS event, r.head_sha AS head_sha, r.head_branch AS head_branch, r.status AS status,
       r.conclusion AS conclusion, parseDateTimeBestEffortOrZero(r.created_at, 'UTC') AS created_at,
       updated AS updated_at, parseDateTimeBestEffortOrZero(r.run_started_at, 'UTC') AS run_started_at,
       r.html_url AS html_url, d.repo AS repository_full_name,
       lower(r.head_repository.full_name) AS head_repository_full_name, d.hud_workflow_run AS p,
       toUInt64(greatest(r.run_attempt, 1)) * 100000000000000
         + multiIf(r.status = 'completed', 3, r.status = 'in_progress', 2, 1) * 10000000000000
         + toUInt64(toUnixTimestamp(updated)) * 1000 AS version
FROM webhook_deliveries AS d
WHERE d.event = 'workflow_run';
-- on one replica of each shard:
ALTER TABLE relay.workflow_job_local ADD INDEX IF NOT EXISTS hud_created_at toDateTime64(created_at, 9, 'UTC') TYPE minmax GRANULARITY 1;
-- on one replica of each shard:
ALTER TABLE relay.workflow_job_local ADD INDEX IF NOT EXISTS hud_run_id run_id TYPE minmax GRANULARITY 1;
-- on one replica of each shard:
ALTER TABLE relay.workflow_job_local MATERIALIZE INDEX hud_created_at;
-- on one replica of each shard:
ALTER TABLE relay.workflow_job_local MATERIALIZE INDEX hud_run_id;
CREATE TABLE IF NOT EXISTS relay.hud_downstream_job_local ON CLUSTER '{cluster}' (
  id Int64,
  run Int64,
  run_id String,
  run_attempt String,
  downstream_repo String,
  head_sha String,
  pr_number Int64,
  workflow_run_url String,
  workflow_name String,
  job_name String,
  status String,
  conclusion String,
  dispatched_at DateTime,
  started_at DateTime,
  completed_at DateTime,
  event_type String,
  version UInt64
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/relay/hud_downstream_job_local', '{replica}', version)
ORDER BY id SETTINGS index_granularity = 256;
CREATE TABLE IF NOT EXISTS relay.hud_downstream_job ON CLUSTER '{cluster}' AS relay.hud_downstream_job_local
ENGINE = Distributed('{cluster}', relay, hud_downstream_job_local, cityHash64(id));
CREATE MATERIALIZED VIEW IF NOT EXISTS hud_downstream_job_mv ON CLUSTER '{cluster}' TO hud_downstream_job AS SELECT relay_hud_job_id(id) AS id, toInt64OrZero(run_id) AS run, run_id, run_attempt, downstream_repo, head_sha,
       pr_number, workflow_run_url, workflow_name, job_name, status, conclusion, dispatched_at, started_at,
       completed_at, event_type, version
FROM relay.crcr_workflow_job_local;
INSERT INTO hud_downstream_job
SELECT relay_hud_job_id(id) AS id, toInt64OrZero(run_id) AS run, run_id, run_attempt, downstream_repo, head_sha,
       pr_number, workflow_run_url, workflow_name, job_name, status, conclusion, dispatched_at, started_at,
       completed_at, event_type, version
FROM crcr_workflow_job;
DROP VIEW IF EXISTS materialized_views.workflow_job_by_head_sha ON CLUSTER '{cluster}';
CREATE TABLE IF NOT EXISTS materialized_views.workflow_job_by_head_sha_local ON CLUSTER '{cluster}' (
  head_sha String,
  id Int64
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/materialized_views/workflow_job_by_head_sha_local', '{replica}')
ORDER BY (head_sha, id);
CREATE TABLE IF NOT EXISTS materialized_views.workflow_job_by_head_sha ON CLUSTER '{cluster}' AS materialized_views.workflow_job_by_head_sha_local
ENGINE = Distributed('{cluster}', materialized_views, workflow_job_by_head_sha_local, cityHash64(head_sha, id));
CREATE MATERIALIZED VIEW IF NOT EXISTS hud_job_by_head_sha_mv ON CLUSTER '{cluster}' TO materialized_views.workflow_job_by_head_sha AS SELECT head_sha, toInt64(id) AS id FROM relay.workflow_job_local;
CREATE MATERIALIZED VIEW IF NOT EXISTS hud_downstream_job_by_head_sha_mv ON CLUSTER '{cluster}' TO materialized_views.workflow_job_by_head_sha AS SELECT head_sha, relay_hud_job_id(id) AS id FROM relay.crcr_workflow_job_local;
INSERT INTO materialized_views.workflow_job_by_head_sha
SELECT head_sha, toInt64(id) FROM workflow_job;
INSERT INTO materialized_views.workflow_job_by_head_sha
SELECT head_sha, relay_hud_job_id(id) FROM crcr_workflow_job;
DROP VIEW IF EXISTS materialized_views.workflow_job_by_created_at ON CLUSTER '{cluster}';
CREATE TABLE IF NOT EXISTS materialized_views.workflow_job_by_created_at_local ON CLUSTER '{cluster}' (
  created_at DateTime64(9, 'UTC'),
  id Int64
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/materialized_views/workflow_job_by_created_at_local', '{replica}')
PARTITION BY toYYYYMM(created_at) ORDER BY (created_at, id);
CREATE TABLE IF NOT EXISTS materialized_views.workflow_job_by_created_at ON CLUSTER '{cluster}' AS materialized_views.workflow_job_by_created_at_local
ENGINE = Distributed('{cluster}', materialized_views, workflow_job_by_created_at_local, cityHash64(created_at, id));
CREATE MATERIALIZED VIEW IF NOT EXISTS hud_job_by_created_at_mv ON CLUSTER '{cluster}' TO materialized_views.workflow_job_by_created_at AS SELECT toDateTime64(created_at, 9, 'UTC') AS created_at, toInt64(id) AS id FROM relay.workflow_job_local;
CREATE MATERIALIZED VIEW IF NOT EXISTS hud_downstream_job_by_created_at_mv ON CLUSTER '{cluster}' TO materialized_views.workflow_job_by_created_at AS SELECT toDateTime64(dispatched_at, 9, 'UTC') AS created_at, relay_hud_job_id(id) AS id FROM relay.crcr_workflow_job_local;
INSERT INTO materialized_views.workflow_job_by_created_at
SELECT toDateTime64(created_at, 9, 'UTC'), toInt64(id) FROM workflow_job;
INSERT INTO materialized_views.workflow_job_by_created_at
SELECT toDateTime64(dispatched_at, 9, 'UTC'), relay_hud_job_id(id) FROM crcr_workflow_job;
DROP VIEW IF EXISTS materialized_views.workflow_run_by_head_sha ON CLUSTER '{cluster}';
CREATE TABLE IF NOT EXISTS materialized_views.workflow_run_by_head_sha_local ON CLUSTER '{cluster}' (
  head_sha String,
  id Int64
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/materialized_views/workflow_run_by_head_sha_local', '{replica}')
ORDER BY (head_sha, id);
CREATE TABLE IF NOT EXISTS materialized_views.workflow_run_by_head_sha ON CLUSTER '{cluster}' AS materialized_views.workflow_run_by_head_sha_local
ENGINE = Distributed('{cluster}', materialized_views, workflow_run_by_head_sha_local, cityHash64(head_sha, id));
CREATE MATERIALIZED VIEW IF NOT EXISTS hud_run_by_head_sha_mv ON CLUSTER '{cluster}' TO materialized_views.workflow_run_by_head_sha AS SELECT head_sha, toInt64(id) AS id FROM relay.workflow_run_local;
CREATE MATERIALIZED VIEW IF NOT EXISTS hud_downstream_run_by_head_sha_mv ON CLUSTER '{cluster}' TO materialized_views.workflow_run_by_head_sha AS SELECT head_sha, toInt64OrZero(run_id) AS id FROM relay.crcr_workflow_job_local WHERE toInt64OrZero(run_id) != 0;
INSERT INTO materialized_views.workflow_run_by_head_sha
SELECT head_sha, toInt64(id) FROM workflow_run;
INSERT INTO materialized_views.workflow_run_by_head_sha
SELECT head_sha, toInt64OrZero(run_id) FROM crcr_workflow_job WHERE toInt64OrZero(run_id) != 0;
DROP VIEW IF EXISTS materialized_views.workflow_run_by_created_at ON CLUSTER '{cluster}';
CREATE TABLE IF NOT EXISTS materialized_views.workflow_run_by_created_at_local ON CLUSTER '{cluster}' (
  created_at DateTime64(9, 'UTC'),
  id Int64
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/materialized_views/workflow_run_by_created_at_local', '{replica}')
PARTITION BY toYYYYMM(created_at) ORDER BY (created_at, id);
CREATE TABLE IF NOT EXISTS materialized_views.workflow_run_by_created_at ON CLUSTER '{cluster}' AS materialized_views.workflow_run_by_created_at_local
ENGINE = Distributed('{cluster}', materialized_views, workflow_run_by_created_at_local, cityHash64(created_at, id));
CREATE MATERIALIZED VIEW IF NOT EXISTS hud_run_by_created_at_mv ON CLUSTER '{cluster}' TO materialized_views.workflow_run_by_created_at AS SELECT toDateTime64(created_at, 9, 'UTC') AS created_at, toInt64(id) AS id FROM relay.workflow_run_local;
CREATE MATERIALIZED VIEW IF NOT EXISTS hud_downstream_run_by_created_at_mv ON CLUSTER '{cluster}' TO materialized_views.workflow_run_by_created_at AS SELECT toDateTime64(dispatched_at, 9, 'UTC') AS created_at, toInt64OrZero(run_id) AS id
FROM relay.crcr_workflow_job_local WHERE toInt64OrZero(run_id) != 0;
INSERT INTO materialized_views.workflow_run_by_created_at
SELECT toDateTime64(created_at, 9, 'UTC'), toInt64(id) FROM workflow_run;
INSERT INTO materialized_views.workflow_run_by_created_at
SELECT toDateTime64(dispatched_at, 9, 'UTC'), toInt64OrZero(run_id) FROM crcr_workflow_job WHERE toInt64OrZero(run_id) != 0;
CREATE TABLE IF NOT EXISTS relay.hud_test_runs_local ON CLUSTER '{cluster}' (
  workflow_id Int64,
  job_id Int64,
  repo String,
  day Date,
  file String,
  classname String,
  name String,
  upload_id String,
  seq UInt32,
  idx UInt32,
  run_attempt String,
  duration Float64,
  outcome String,
  reruns UInt32,
  message String,
  uploaded_at DateTime,
  version UInt64
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/relay/hud_test_runs_local', '{replica}', version)
PARTITION BY toYYYYMM(day) ORDER BY (workflow_id, job_id, repo, day, file, classname, name, upload_id, seq, idx);
CREATE TABLE IF NOT EXISTS relay.hud_test_runs ON CLUSTER '{cluster}' AS relay.hud_test_runs_local
ENGINE = Distributed('{cluster}', relay, hud_test_runs_local, cityHash64(workflow_id));
CREATE MATERIALIZED VIEW IF NOT EXISTS hud_test_runs_mv ON CLUSTER '{cluster}' TO hud_test_runs AS SELECT toInt64OrZero(run_id) AS workflow_id, relay_hud_job_id(job_id) AS job_id, repo, day, file, classname, name,
       upload_id, seq, idx, run_attempt, duration, outcome, reruns, message, uploaded_at, version
FROM relay.test_results_local;
INSERT INTO hud_test_runs
SELECT toInt64OrZero(run_id) AS workflow_id, relay_hud_job_id(job_id) AS job_id, repo, day, file, classname, name,
       upload_id, seq, idx, run_attempt, duration, outcome, reruns, message, uploaded_at, version
FROM test_results;
CREATE OR REPLACE VIEW default.push ON CLUSTER '{cluster}' AS
WITH hud_push AS p
SELECT p.ref AS ref, p.before AS before, p.after AS after, p.forced AS forced, p.compare AS compare,
       p.head_commit AS head_commit, p.commits AS commits, p.repository AS repository, delivery_id AS dynamoKey
FROM hud_deliveries FINAL
WHERE event = 'push';
CREATE OR REPLACE VIEW default.pull_request ON CLUSTER '{cluster}' AS
WITH hud_pull_request AS p
SELECT p.number AS number, p.title AS title, p.body AS body, p.state AS state, p.draft AS draft, p.merged AS merged,
       p.html_url AS html_url, p.created_at AS created_at, p.updated_at AS updated_at, p.closed_at AS closed_at,
       p.merged_at AS merged_at, p.merge_commit_sha AS merge_commit_sha, p.author_association AS author_association,
       p.labels AS labels, p.head AS head, p.base AS base, p.user AS user, p.merged_by AS merged_by,
       p.auto_merge AS auto_merge,
       repo AS repository_full_name, concat(repo, '/', toString(number)) AS dynamoKey
FROM hud_deliveries FINAL
WHERE event = 'pull_request'
ORDER BY received_at_ms DESC, delivery_id
LIMIT 1 BY repo, number;
CREATE OR REPLACE VIEW default.issues ON CLUSTER '{cluster}' AS
WITH hud_issue AS i
SELECT i.number AS number, i.title AS title, i.state AS state, i.html_url AS html_url, i.body AS body,
       i.created_at AS created_at, i.updated_at AS updated_at, i.closed_at AS closed_at,
       i.repository_url AS repository_url, i.author_association AS author_association, i.assignee AS assignee,
       i.labels AS labels, i.user AS user, i.pull_request AS pull_request,
       repo AS repository_full_name, concat(repo, '/', toString(number)) AS dynamoKey
FROM hud_deliveries FINAL
WHERE event = 'issues'
ORDER BY received_at_ms DESC, delivery_id
LIMIT 1 BY repo, number;
CREATE OR REPLACE VIEW default.issue_comment ON CLUSTER '{cluster}' AS
WITH hud_issue_comment AS c
SELECT c.id AS id, c.body AS body, c.html_url AS html_url, c.issue_url AS issue_url,
       c.author_association AS author_association, c.created_at AS created_at, c.updated_at AS updated_at,
       c.user AS user, repo AS repository_full_name, concat(repo, '/', toString(c.id)) AS dynamoKey
FROM hud_deliveries FINAL
WHERE event = 'issue_comment'
ORDER BY received_at_ms DESC, delivery_id
LIMIT 1 BY repo, id;
CREATE OR REPLACE VIEW default.merges ON CLUSTER '{cluster}' AS
WITH hud_pull_request AS p
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
FROM hud_deliveries FINAL
WHERE event = 'pull_request' AND action = 'closed' AND p.merged
ORDER BY received_at_ms DESC, delivery_id
LIMIT 1 BY repo, pr_num;
CREATE OR REPLACE VIEW misc.disabled_tests_historical ON CLUSTER '{cluster}' AS
WITH hud_issue AS i
SELECT
  toDate(received_at) AS day,
  received_at AS timestamp,
  trim(substring(i.title, 10)) AS name,
  toInt32(i.number) AS issueNumber,
  arrayFilter(x -> x != '', arrayMap(x -> lower(trim(x)), splitByChar(',', extract(i.body, '(?mi)^\\s*platforms:\\s*([^\\r\\n]*)')))) AS platforms
FROM hud_deliveries FINAL
WHERE event = 'issues' AND startsWith(i.title, 'DISABLED ');
CREATE OR REPLACE VIEW default.pull_request_review ON CLUSTER '{cluster}' AS
WITH JSONExtract(payload, 'review',
  'Tuple(id Int64, state String, body String, html_url String, pull_request_url String, author_association String,
         submitted_at Nullable(DateTime64(9, \'UTC\')), user Tuple(login String))') AS r
SELECT r AS review, JSONExtractString(payload, 'action') AS action,
       concat(repo, '/', toString(r.id)) AS dynamoKey
FROM hud_deliveries FINAL
WHERE event = 'pull_request_review'
ORDER BY received_at_ms DESC, delivery_id
LIMIT 1 BY repo, tupleElement(r, 'id');
CREATE OR REPLACE VIEW default.issues_label_event ON CLUSTER '{cluster}' AS
SELECT toDateTime64(received_at, 3, 'UTC') AS event_time, action, repo AS repo_name,
       JSONExtractInt(payload, 'issue', 'number') AS issue_number,
       JSONExtractString(payload, 'label', 'name') AS label_name,
       JSONExtractString(payload, 'sender', 'login') AS sender_login
FROM hud_deliveries FINAL
WHERE event = 'issues' AND action IN ('labeled', 'unlabeled');
CREATE OR REPLACE VIEW default.pull_label_event ON CLUSTER '{cluster}' AS
SELECT toDateTime64(received_at, 3, 'UTC') AS event_time, action, repo AS repo_name,
       JSONExtractInt(payload, 'pull_request', 'number') AS pr_number,
       JSONExtractString(payload, 'label', 'name') AS label_name,
       JSONExtractString(payload, 'sender', 'login') AS sender_login
FROM hud_deliveries FINAL
WHERE event = 'pull_request' AND action IN ('labeled', 'unlabeled');
CREATE OR REPLACE VIEW default.workflow_run ON CLUSTER '{cluster}' AS
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
    id, name, head_sha, head_branch, event, status, conclusion, html_url,
    created_at AS created, updated_at AS updated, run_started_at AS started,
    run_attempt, run_number, workflow_id, repository_full_name, head_repository_full_name, p
  FROM hud_workflow_run FINAL
  UNION ALL
  SELECT
    run, workflow_name, head_sha, '', event_type,
    if(completed, 'completed', 'in_progress'), if(completed, conclusion, ''), workflow_run_url,
    created, updated, started, toInt64(attempt), 0, 0,
    downstream_repo, downstream_repo,
    JSONExtract(if(pr_number > 0, toJSONString(CAST(tuple(tuple([(pr_number, tuple(head_sha))])),
                                        'Tuple(workflow_run Tuple(pull_requests Array(Tuple(number Int64, head Tuple(sha String)))))')), ''), 'workflow_run',
      'Tuple(artifacts_url String, path String,
         head_commit Tuple(author Tuple(email String, name String), committer Tuple(email String, name String), id String, message String, timestamp DateTime64(9, \'UTC\'), tree_id String),
         repository Tuple(owner Tuple(login String)), head_repository Tuple(owner Tuple(login String)),
         actor Tuple(id Int64, login String, type String), triggering_actor Tuple(id Int64, login String, type String),
         pull_requests Array(Tuple(base Tuple(ref String, repo Tuple(id Int64, name String, url String), sha String), head Tuple(ref String, repo Tuple(id Int64, name String, url String), sha String), id Int64, number Int64, url String)))')
  FROM (
    SELECT
      downstream_repo, run,
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
    FROM hud_downstream_job FINAL
    WHERE run != 0
    GROUP BY downstream_repo, run
  )
);
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
    c.id, c.run, toInt64(greatest(toUInt32OrZero(c.run_attempt), 1)),
    if(c.job_name = '', c.workflow_name, c.job_name), c.workflow_name, c.head_sha, '',
    c.status, if(c.status = 'completed', c.conclusion, ''), c.workflow_run_url, c.downstream_repo,
    c.dispatched_at, c.started_at, c.completed_at,
    [], 0, '', '',
    [], [], [], [], [], [],
    c.event_type,
    c.dispatched_at,
    greatest(c.dispatched_at, c.started_at, c.completed_at)
  FROM hud_downstream_job AS c FINAL
);
CREATE OR REPLACE VIEW default.test_run_s3 ON CLUSTER '{cluster}' AS
SELECT
  name, classname, file, file AS invoking_file,
  job_id,
  workflow_id,
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
FROM hud_test_runs FINAL;
