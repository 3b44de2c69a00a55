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

-- relay's job id (64 hex digits) as the HUD's Int64 job id: the number
-- its first 15 digits make (60 bits, so always positive).
CREATE OR REPLACE FUNCTION relay_hud_job_id AS (job_id) ->
  toInt64(reinterpretAsUInt64(reverse(unhex(concat('0', substring(lower(job_id), 1, 15))))));

-- Each payload view below parses a delivery's JSON once (WITH: one
-- expression, computed once a row), into a typed tuple: JSONExtract
-- matches a named tuple's fields by key; a missing key or a null is the
-- type's default.

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
  concat(repository_full_name, '/', toString(id)) AS dynamoKey
FROM (
  -- Upstream jobs, from workflow_job webhooks.
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
  -- Downstream jobs relay dispatched, on the upstream commit they ran for.
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

-- One row per run id: its latest attempt.
CREATE OR REPLACE VIEW default.workflow_run AS
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
  -- Upstream runs, from workflow_run webhooks; what relay does not type
  -- comes from the delivery's payload.
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
  -- The downstream runs relay's jobs ran in (no workflow_run webhook of
  -- theirs reaches relay): one row per run, from its jobs' latest attempt.
  SELECT
    toInt64OrZero(run_id), workflow_name, head_sha, '', event_type,
    if(completed, 'completed', 'in_progress'), if(completed, conclusion, ''), workflow_run_url,
    created, updated, started, toInt64(attempt), 0, 0,
    downstream_repo, downstream_repo,
    -- The pull request it ran for, as a payload would carry it.
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
      -- The run failed when one of its jobs did: the latest such conclusion.
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

-- Pushes, one row per delivery (the HUD reads push without FINAL).
CREATE OR REPLACE VIEW default.push AS
WITH JSONExtract(payload,
  'Tuple(ref String, before String, after String, forced Bool,
         head_commit Tuple(id String, message String, timestamp DateTime64(9, \'UTC\'), tree_id String, author Tuple(email String, name String, username String)),
         repository Tuple(full_name String, name String, owner Tuple(name String, login String)))') AS p
SELECT p.ref AS ref, p.before AS before, p.after AS after, p.forced AS forced, p.head_commit AS head_commit,
       p.repository AS repository, delivery_id AS dynamoKey
FROM webhook_deliveries FINAL
WHERE event = 'push';

-- Pull requests, one row per (repository, number): the newest delivery.
CREATE OR REPLACE VIEW default.pull_request AS
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

-- Issues, one row per (repository, number): the newest delivery.
CREATE OR REPLACE VIEW default.issues AS
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

-- Tests disabled through "DISABLED <test>" issues, as the HUD's
-- disabled-tests job records them: a row per issues delivery of such an
-- issue, its platforms from the body's "Platforms: a, b" line (none: all).
CREATE OR REPLACE VIEW misc.disabled_tests_historical AS
WITH JSONExtract(payload, 'issue', 'Tuple(number Int64, title String, body String)') AS i
SELECT
  toDate(received_at) AS day,
  received_at AS timestamp,
  trim(substring(i.title, 10)) AS name,
  toInt32(i.number) AS issueNumber,
  arrayFilter(x -> x != '', arrayMap(x -> lower(trim(x)), splitByChar(',', extract(i.body, '(?mi)^\\s*platforms:\\s*([^\\r\\n]*)')))) AS platforms
FROM webhook_deliveries FINAL
WHERE event = 'issues' AND startsWith(i.title, 'DISABLED ');

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
