-- relay's ClickHouse schema, migration 4: the tables and views the PyTorch
-- HUD (pytorch/test-infra, torchci) reads, under the names it reads them by,
-- so that its own SQL (torchci/clickhouse_queries/*/query.sql) runs unchanged
-- on relay's data. Relay's tables stay in relay's database; everything here
-- is a view over them (or, for what relay has no source for, an empty table
-- the HUD can still join), in the databases `default`, `materialized_views`
-- and `misc`.
--
-- requires: ClickHouse >= 23.3
-- (views with named tuples, DateTime64 and JSONExtract into typed tuples;
-- the HUD's queries themselves need query parameters, window functions and
-- tuple access by name.) On an older server `relay-stats migrate` skips
-- this migration, says so, and applies it once the server is new enough.
-- tools/clickhouse/check-sql runs it on chDB, and tools/clickhouse/check-hud
-- runs the HUD's queries over it with the dev stack's data.
--
-- Unqualified table names below are relay's tables: a view binds them to
-- the database current when it is created (relay's). The views read with
-- FINAL inside, so the HUD's own `FROM view FINAL` is exact before merges.
--
-- Semantics (docs/architecture.md, "HUD compatibility"):
-- - default.workflow_job is one row per GitHub job: the upstream jobs from
--   workflow_job webhooks, and every downstream job relay dispatched (from
--   crcr_workflow_job), under the downstream repository, on the upstream
--   commit it ran for. A downstream job's id is a stable positive Int64 made
--   from relay's job id (failed_test_runs.job_id matches it), its
--   workflow_event is the upstream event it ran for (the HUD hides
--   'repository_dispatch' runs), and its log_url is the downstream run's page.
-- - default.workflow_run is one row per run id (the HUD's), its latest
--   attempt; relay keeps one per attempt. The downstream runs relay's jobs
--   ran in are rows too (made from their jobs), so the HUD's joins of jobs
--   to runs find them.
-- - Fields relay does not type (head_commit, actor, pull_requests, ...) come
--   from the raw webhook payload the row was made from (webhook_deliveries).
-- - No torchci log classifier runs here: torchci_classification is empty.

CREATE DATABASE IF NOT EXISTS materialized_views;
CREATE DATABASE IF NOT EXISTS misc;

-- relay's job id (hex) as the HUD's Int64 job id: its first 60 bits.
CREATE OR REPLACE FUNCTION relay_hud_job_id AS (job_id) -> toInt64(reinterpretAsUInt64(reverse(unhex(substring(lower(job_id), 1, 15)))));

CREATE OR REPLACE VIEW default.workflow_job AS
SELECT
  toInt64(j.id) AS id,
  toInt64(j.run_id) AS run_id,
  toInt64(j.run_attempt) AS run_attempt,
  j.name AS name,
  j.workflow_name AS workflow_name,
  j.head_sha AS head_sha,
  j.head_branch AS head_branch,
  j.status AS status,
  j.conclusion AS conclusion,
  j.conclusion AS conclusion_kg,
  j.html_url AS html_url,
  concat('https://api.github.com/repos/', j.repository_full_name, '/actions/jobs/', toString(j.id)) AS url,
  j.html_url AS log_url,
  j.repository_full_name AS repository_full_name,
  toDateTime64(j.created_at, 9, 'UTC') AS created_at,
  toDateTime64(j.started_at, 9, 'UTC') AS started_at,
  toDateTime64(j.completed_at, 9, 'UTC') AS completed_at,
  j.labels AS labels,
  toInt64(j.runner_id) AS runner_id,
  j.runner_name AS runner_name,
  j.runner_group_name AS runner_group_name,
  CAST(arrayMap((n, s, c, num, sa, ca) -> (toDateTime64(ca, 9, 'UTC'), c, n, toInt64(num), toDateTime64(sa, 9, 'UTC'), s),
                j.`steps.name`, j.`steps.status`, j.`steps.conclusion`, j.`steps.number`, j.`steps.started_at`, j.`steps.completed_at`),
       'Array(Tuple(completed_at DateTime64(9, \'UTC\'), conclusion String, name String, number Int64, started_at DateTime64(9, \'UTC\'), status String))') AS steps,
  CAST(([], [], 0, '', 0, ''), 'Tuple(captures Array(String), context Array(String), job_id Int64, line String, line_num Int64, rule String)') AS torchci_classification,
  torchci_classification AS torchci_classification_temp,
  torchci_classification AS torchci_classification_kg,
  r.event AS workflow_event,
  concat(j.repository_full_name, '/', toString(j.id)) AS dynamoKey
FROM workflow_job AS j FINAL
LEFT JOIN (SELECT id, argMax(event, run_attempt) AS event FROM workflow_run FINAL GROUP BY id) AS r ON r.id = j.run_id
UNION ALL
SELECT
  relay_hud_job_id(c.id) AS id,
  toInt64OrZero(c.run_id) AS run_id,
  toInt64(greatest(toUInt32OrZero(c.run_attempt), 1)) AS run_attempt,
  if(c.job_name = '', c.workflow_name, c.job_name) AS name,
  c.workflow_name AS workflow_name,
  c.head_sha AS head_sha,
  '' AS head_branch,
  c.status AS status,
  if(c.status = 'completed', c.conclusion, '') AS conclusion,
  conclusion AS conclusion_kg,
  c.workflow_run_url AS html_url,
  concat('https://api.github.com/repos/', c.downstream_repo, '/actions/jobs/', toString(relay_hud_job_id(c.id))) AS url,
  c.workflow_run_url AS log_url,
  c.downstream_repo AS repository_full_name,
  toDateTime64(c.dispatched_at, 9, 'UTC') AS created_at,
  toDateTime64(c.started_at, 9, 'UTC') AS started_at,
  toDateTime64(c.completed_at, 9, 'UTC') AS completed_at,
  CAST([], 'Array(String)') AS labels,
  toInt64(0) AS runner_id,
  '' AS runner_name,
  '' AS runner_group_name,
  CAST([], 'Array(Tuple(completed_at DateTime64(9, \'UTC\'), conclusion String, name String, number Int64, started_at DateTime64(9, \'UTC\'), status String))') AS steps,
  CAST(([], [], 0, '', 0, ''), 'Tuple(captures Array(String), context Array(String), job_id Int64, line String, line_num Int64, rule String)') AS torchci_classification,
  torchci_classification AS torchci_classification_temp,
  torchci_classification AS torchci_classification_kg,
  c.event_type AS workflow_event,
  concat(c.downstream_repo, '/', c.id) AS dynamoKey
FROM crcr_workflow_job AS c FINAL;

-- One row per run id: its latest attempt.
CREATE OR REPLACE VIEW default.workflow_run AS
SELECT
  toInt64(r.id) AS id,
  r.name AS name,
  r.head_sha AS head_sha,
  r.head_branch AS head_branch,
  r.event AS event,
  r.status AS status,
  r.conclusion AS conclusion,
  r.html_url AS html_url,
  JSONExtractString(w.payload, 'workflow_run', 'artifacts_url') AS artifacts_url,
  toDateTime64(r.created_at, 9, 'UTC') AS created_at,
  toDateTime64(r.updated_at, 9, 'UTC') AS updated_at,
  toDateTime64(r.run_started_at, 9, 'UTC') AS run_started_at,
  toInt64(r.run_attempt) AS run_attempt,
  toInt64(r.run_number) AS run_number,
  toInt64(r.workflow_id) AS workflow_id,
  CAST(((JSONExtractString(w.payload, 'workflow_run', 'head_commit', 'author', 'email'),
         JSONExtractString(w.payload, 'workflow_run', 'head_commit', 'author', 'name')),
        (JSONExtractString(w.payload, 'workflow_run', 'head_commit', 'committer', 'email'),
         JSONExtractString(w.payload, 'workflow_run', 'head_commit', 'committer', 'name')),
        JSONExtractString(w.payload, 'workflow_run', 'head_commit', 'id'),
        JSONExtractString(w.payload, 'workflow_run', 'head_commit', 'message'),
        parseDateTime64BestEffortOrZero(JSONExtractString(w.payload, 'workflow_run', 'head_commit', 'timestamp'), 9, 'UTC'),
        JSONExtractString(w.payload, 'workflow_run', 'head_commit', 'tree_id')),
       'Tuple(author Tuple(email String, name String), committer Tuple(email String, name String), id String, message String, timestamp DateTime64(9, \'UTC\'), tree_id String)') AS head_commit,
  CAST((r.repository_full_name, splitByChar('/', r.repository_full_name)[2],
        (JSONExtractString(w.payload, 'workflow_run', 'repository', 'owner', 'login'))),
       'Tuple(full_name String, name String, owner Tuple(login String))') AS repository,
  CAST((r.head_repository_full_name, splitByChar('/', r.head_repository_full_name)[2],
        (JSONExtractString(w.payload, 'workflow_run', 'head_repository', 'owner', 'login'))),
       'Tuple(full_name String, name String, owner Tuple(login String))') AS head_repository,
  JSONExtract(JSONExtractRaw(w.payload, 'workflow_run', 'actor'), 'Tuple(id Int64, login String, type String)') AS actor,
  JSONExtract(JSONExtractRaw(w.payload, 'workflow_run', 'triggering_actor'), 'Tuple(id Int64, login String, type String)') AS triggering_actor,
  JSONExtract(JSONExtractRaw(w.payload, 'workflow_run', 'pull_requests'),
              'Array(Tuple(base Tuple(ref String, repo Tuple(id Int64, name String, url String), sha String), head Tuple(ref String, repo Tuple(id Int64, name String, url String), sha String), id Int64, number Int64, url String))') AS pull_requests,
  concat(r.repository_full_name, '/', toString(r.id)) AS dynamoKey
FROM (SELECT * FROM workflow_run FINAL ORDER BY id, run_attempt DESC LIMIT 1 BY id) AS r
LEFT JOIN (SELECT delivery_id, any(payload) AS payload FROM webhook_deliveries FINAL WHERE event = 'workflow_run' GROUP BY delivery_id) AS w
  ON w.delivery_id = r.delivery_id
UNION ALL
-- The downstream runs relay's jobs belong to (no workflow_run webhook of
-- theirs reaches relay): one row per run, from its jobs' latest attempt.
SELECT
  toInt64OrZero(c.run_id) AS id,
  c.workflow_name AS name,
  c.head_sha AS head_sha,
  '' AS head_branch,
  c.event_type AS event,
  if(c.completed, 'completed', 'in_progress') AS status,
  if(c.completed, c.conclusion, '') AS conclusion,
  c.workflow_run_url AS html_url,
  '' AS artifacts_url,
  toDateTime64(c.created, 9, 'UTC') AS created_at,
  toDateTime64(c.updated, 9, 'UTC') AS updated_at,
  toDateTime64(c.started, 9, 'UTC') AS run_started_at,
  toInt64(c.attempt) AS run_attempt,
  toInt64(0) AS run_number,
  toInt64(0) AS workflow_id,
  CAST((('', ''), ('', ''), c.head_sha, '', toDateTime64(0, 9, 'UTC'), ''),
       'Tuple(author Tuple(email String, name String), committer Tuple(email String, name String), id String, message String, timestamp DateTime64(9, \'UTC\'), tree_id String)') AS head_commit,
  CAST((c.downstream_repo, splitByChar('/', c.downstream_repo)[2], tuple(splitByChar('/', c.downstream_repo)[1])),
       'Tuple(full_name String, name String, owner Tuple(login String))') AS repository,
  repository AS head_repository,
  CAST((0, '', ''), 'Tuple(id Int64, login String, type String)') AS actor,
  actor AS triggering_actor,
  CAST(if(c.pr_number > 0, [((c.base_ref, (0, '', ''), ''), ('', (0, '', ''), c.head_sha), 0, c.pr_number, '')], []),
       'Array(Tuple(base Tuple(ref String, repo Tuple(id Int64, name String, url String), sha String), head Tuple(ref String, repo Tuple(id Int64, name String, url String), sha String), id Int64, number Int64, url String))') AS pull_requests,
  concat(c.downstream_repo, '/', c.run_id) AS dynamoKey
FROM (
  SELECT
    downstream_repo, run_id,
    argMax(workflow_name, toUInt32OrZero(run_attempt)) AS workflow_name,
    argMax(head_sha, toUInt32OrZero(run_attempt)) AS head_sha,
    argMax(event_type, toUInt32OrZero(run_attempt)) AS event_type,
    argMax(workflow_run_url, toUInt32OrZero(run_attempt)) AS workflow_run_url,
    argMax(pr_number, toUInt32OrZero(run_attempt)) AS pr_number,
    '' AS base_ref,
    greatest(max(toUInt32OrZero(run_attempt)), 1) AS attempt,
    min(status = 'completed') = 1 AS completed,
    if(countIf(conclusion NOT IN ('success', 'skipped', 'neutral')) > 0,
       argMaxIf(conclusion, completed_at, conclusion NOT IN ('success', 'skipped', 'neutral')), 'success') AS conclusion,
    min(dispatched_at) AS created,
    max(greatest(completed_at, started_at, dispatched_at)) AS updated,
    min(started_at) AS started
  FROM crcr_workflow_job FINAL
  WHERE run_id != '' AND toInt64OrZero(run_id) != 0
  GROUP BY downstream_repo, run_id
) AS c;

-- Pushes, one row per delivery (the HUD reads push without FINAL).
CREATE OR REPLACE VIEW default.push AS
SELECT
  JSONExtractString(payload, 'ref') AS ref,
  JSONExtractString(payload, 'before') AS before,
  JSONExtractString(payload, 'after') AS after,
  JSONExtractBool(payload, 'forced') AS forced,
  CAST((JSONExtractString(payload, 'head_commit', 'id'),
        JSONExtractString(payload, 'head_commit', 'message'),
        parseDateTime64BestEffortOrZero(JSONExtractString(payload, 'head_commit', 'timestamp'), 9, 'UTC'),
        JSONExtractString(payload, 'head_commit', 'tree_id'),
        (JSONExtractString(payload, 'head_commit', 'author', 'email'), JSONExtractString(payload, 'head_commit', 'author', 'name'),
         JSONExtractString(payload, 'head_commit', 'author', 'username'))),
       'Tuple(id String, message String, timestamp DateTime64(9, \'UTC\'), tree_id String, author Tuple(email String, name String, username String))') AS head_commit,
  CAST((JSONExtractString(payload, 'repository', 'full_name'), JSONExtractString(payload, 'repository', 'name'),
        (JSONExtractString(payload, 'repository', 'owner', 'name'), JSONExtractString(payload, 'repository', 'owner', 'login'))),
       'Tuple(full_name String, name String, owner Tuple(name String, login String))') AS repository,
  delivery_id AS dynamoKey
FROM webhook_deliveries FINAL
WHERE event = 'push';

-- Pull requests, one row per (repository, number): the newest delivery.
CREATE OR REPLACE VIEW default.pull_request AS
SELECT
  JSONExtractInt(payload, 'pull_request', 'number') AS number,
  JSONExtractString(payload, 'pull_request', 'title') AS title,
  JSONExtractString(payload, 'pull_request', 'state') AS state,
  JSONExtractString(payload, 'pull_request', 'html_url') AS html_url,
  JSONExtractString(payload, 'pull_request', 'created_at') AS created_at,
  JSONExtractString(payload, 'pull_request', 'updated_at') AS updated_at,
  JSONExtractString(payload, 'pull_request', 'closed_at') AS closed_at,
  JSONExtractString(payload, 'pull_request', 'merged_at') AS merged_at,
  JSONExtract(JSONExtractRaw(payload, 'pull_request', 'labels'), 'Array(Tuple(name String))') AS labels,
  CAST((JSONExtractString(payload, 'pull_request', 'head', 'ref'), JSONExtractString(payload, 'pull_request', 'head', 'sha')),
       'Tuple(ref String, sha String)') AS head,
  CAST((JSONExtractString(payload, 'pull_request', 'base', 'ref'), JSONExtractString(payload, 'pull_request', 'base', 'sha')),
       'Tuple(ref String, sha String)') AS base,
  CAST(tuple(JSONExtractString(payload, 'pull_request', 'user', 'login')), 'Tuple(login String)') AS user,
  repo AS repository_full_name,
  concat(repo, '/', toString(number)) AS dynamoKey
FROM webhook_deliveries FINAL
WHERE event = 'pull_request'
ORDER BY received_at_ms DESC
LIMIT 1 BY repo, JSONExtractInt(payload, 'pull_request', 'number');

-- Issues, one row per (repository, number): the newest delivery.
CREATE OR REPLACE VIEW default.issues AS
SELECT
  JSONExtractInt(payload, 'issue', 'number') AS number,
  JSONExtractString(payload, 'issue', 'title') AS title,
  JSONExtractString(payload, 'issue', 'state') AS state,
  JSONExtractString(payload, 'issue', 'html_url') AS html_url,
  JSONExtractString(payload, 'issue', 'body') AS body,
  JSONExtractString(payload, 'issue', 'created_at') AS created_at,
  JSONExtractString(payload, 'issue', 'updated_at') AS updated_at,
  JSONExtractString(payload, 'issue', 'closed_at') AS closed_at,
  CAST(tuple(JSONExtractString(payload, 'issue', 'assignee', 'login')), 'Tuple(login String)') AS assignee,
  JSONExtract(JSONExtractRaw(payload, 'issue', 'labels'), 'Array(Tuple(name String))') AS labels,
  CAST(tuple(JSONExtractString(payload, 'issue', 'user', 'login')), 'Tuple(login String)') AS user,
  repo AS repository_full_name,
  concat(repo, '/', toString(number)) AS dynamoKey
FROM webhook_deliveries FINAL
WHERE event = 'issues'
ORDER BY received_at_ms DESC
LIMIT 1 BY repo, JSONExtractInt(payload, 'issue', 'number');

-- Tests disabled through "DISABLED <test>" issues, as the HUD's
-- disabled-tests job records them: a row per issues delivery of such an
-- issue, its platforms from the body's "Platforms: a, b" line (none: all).
CREATE OR REPLACE VIEW misc.disabled_tests_historical AS
SELECT
  toDate(received_at) AS day,
  received_at AS timestamp,
  trim(substring(JSONExtractString(payload, 'issue', 'title'), 10)) AS name,
  toInt32(JSONExtractInt(payload, 'issue', 'number')) AS issueNumber,
  arrayFilter(p -> p != '', arrayMap(p -> lower(trim(p)),
    splitByChar(',', extract(JSONExtractString(payload, 'issue', 'body'), '(?mi)^\\s*platforms:\\s*([^\\r\\n]*)')))) AS platforms
FROM webhook_deliveries FINAL
WHERE event = 'issues'
  AND startsWith(JSONExtractString(payload, 'issue', 'title'), 'DISABLED ');

-- Downstream results as the HUD's crcr_workflow_job.
CREATE OR REPLACE VIEW default.crcr_workflow_job AS
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

-- Failed test cases, by the HUD job id of their downstream job.
CREATE OR REPLACE VIEW default.failed_test_runs AS
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

-- Job annotations are made in the HUD by people; relay has no source for
-- them. The table exists so the HUD's joins run (and annotations written
-- to it are kept).
CREATE TABLE IF NOT EXISTS default.job_annotation (
  jobID Int64,
  repo String,
  annotation String,
  author String,
  updated_at DateTime64(9, 'UTC')
) ENGINE = ReplacingMergeTree(updated_at) ORDER BY (jobID);

-- The HUD's lookup views, which it uses as secondary indexes
-- (x.id IN (SELECT id FROM mv WHERE ...)).
CREATE OR REPLACE VIEW materialized_views.workflow_job_by_head_sha AS SELECT id, head_sha FROM default.workflow_job;
CREATE OR REPLACE VIEW materialized_views.workflow_job_by_created_at AS SELECT id, created_at FROM default.workflow_job;
CREATE OR REPLACE VIEW materialized_views.workflow_run_by_head_sha AS SELECT id, head_sha FROM default.workflow_run;
CREATE OR REPLACE VIEW materialized_views.workflow_run_by_created_at AS SELECT id, created_at FROM default.workflow_run;
CREATE OR REPLACE VIEW materialized_views.workflow_run_by_run_started_at AS SELECT id, run_started_at FROM default.workflow_run;

-- The HUD's periodic snapshot of queue times: relay-stats inserts one row
-- per machine type every few minutes (rollups/queue_times_snapshot.sql).
CREATE TABLE IF NOT EXISTS default.queue_times_historical (
  time DateTime64(9, 'UTC'),
  avg_queue_s Int64,
  machine_type String,
  count Int64
) ENGINE = ReplacingMergeTree ORDER BY (machine_type, time);
