-- relay's ClickHouse schema, migration 8: what the HUD's pages read, kept
-- where they read it from as the rows are written, so a page's query costs
-- what its own rows cost, not a pass over every row relay ever received.
--
-- requires: ClickHouse >= 23.3
-- (as migrations 4, 6 and 7, whose views these are; materialized views
-- with named tuples and DateTime64.) On an older server `relay-stats
-- migrate` skips this migration, as it skips 4, 6 and 7.
--
-- After migration 7 the HUD's views still read relay's raw tables whole:
-- every view over webhook_deliveries read the key columns of every
-- delivery (FINAL reads before the event filter; 95% of deliveries are
-- workflow_job's, which no view reads), default.workflow_run joined every
-- workflow_run delivery to its run, the downstream jobs were FINAL on
-- relay's 64-character job id, the test tables read every test case (sorted
-- by repo, day and file, not by run), and the HUD's lookup tables
-- (materialized_views.*, secondary indexes in the HUD's own schema) were
-- views over those views, so the HUD's `id IN (SELECT id FROM
-- materialized_views.X WHERE ...)` read every job to find a commit's.
-- Linear in history: a page took 0.1-1 s at a week of PyTorch (capacity.md's
-- 1x) and would take tens of seconds at a year (docs/benchmarks.md, "The
-- PyTorch HUD's queries on a year of PyTorch").
--
-- Here, filled by materialized views as relay-stats writes relay's tables
-- (by the server, on every insert; relay-stats' inserts are unchanged):
-- - hud_deliveries: the deliveries of the five events the views read, with
--   migration 7's tuples, sorted by event.
-- - hud_workflow_run: an upstream run as default.workflow_run shows it,
--   made from its delivery, sorted by run id: no join at query time.
-- - hud_downstream_job: the downstream jobs' columns the views read, under
--   their HUD id.
-- - hud_test_runs: the per-test rows, sorted by run and job, as the HUD's
--   test tables are.
-- - materialized_views.workflow_job_by_head_sha, workflow_job_by_created_at,
--   workflow_run_by_head_sha, workflow_run_by_created_at: tables sorted by
--   their key, as the HUD's own are, instead of views. Like the HUD's, they
--   are appended to on every write (a job's versions all give the same
--   head_sha and created_at; a downstream run has a row per job, at the
--   job's dispatch), so a lookup may name an id twice, which an IN ignores.
--   The HUD's other lookups (by start, completion, PR number; commits and
--   PRs by sha) stay views: their keys change as a row is updated, and no
--   main page reads them.
-- The views read these, and a filter on a view's id (the HUD's lookups)
-- reaches each table's sorting key. Rows written before this migration are
-- copied in below, each after its materialized view exists (a row written
-- meanwhile is in twice, which FINAL or an IN ignores). The views' rows are
-- the same as before; tools/clickhouse/check-hud checks them, and the
-- lookups pair by pair, against relay's own tables. The cost: these rows
-- are written a second time (the test rows most: docs/capacity.md).

-- The deliveries of the events the views read, and migration 7's tuples.
CREATE TABLE IF NOT EXISTS hud_deliveries (
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
) ENGINE = ReplacingMergeTree(version)
PARTITION BY toYYYYMM(received_at)
ORDER BY (event, delivery_id, body_sha256);

CREATE MATERIALIZED VIEW IF NOT EXISTS hud_deliveries_mv TO hud_deliveries AS
SELECT delivery_id, event, action, repo, received_at, received_at_ms, body_sha256, payload, version,
       hud_push, hud_pull_request, hud_issue, hud_issue_comment
FROM webhook_deliveries
WHERE event IN ('push', 'pull_request', 'issues', 'issue_comment', 'pull_request_review');

INSERT INTO hud_deliveries
SELECT delivery_id, event, action, repo, received_at, received_at_ms, body_sha256, payload, version,
       hud_push, hud_pull_request, hud_issue, hud_issue_comment
FROM webhook_deliveries
WHERE event IN ('push', 'pull_request', 'issues', 'issue_comment', 'pull_request_review');

-- An upstream run, one row per delivery, made from the payload as
-- relay-stats makes relay.workflow_run's row from it (services/stats/src/
-- rows.cc, WorkflowRunRow: the same fields, the repository from the
-- delivery, lower-cased), with migration 7's tuple. The version orders a
-- run's rows as default.workflow_run picks one: the latest attempt, then
-- relay's version of it (the status's rank, then updated_at in ms).
CREATE TABLE IF NOT EXISTS hud_workflow_run (
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
) ENGINE = ReplacingMergeTree(version)
PARTITION BY toYYYYMM(created_at)
ORDER BY id;

CREATE MATERIALIZED VIEW IF NOT EXISTS hud_workflow_run_mv TO hud_workflow_run AS
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

-- relay.workflow_job is sorted by id and partitioned by month; the HUD also
-- reads it by creation time and by run (default.workflow_job's created_at,
-- as DateTime64, and run_id). Both grow with the id, so a minmax index of
-- each skips the granules outside a week or a run (also under FINAL: a
-- job's versions share both). The rows already there are indexed by a
-- mutation, in the background; until it ends a read is right, not faster.
ALTER TABLE workflow_job ADD INDEX IF NOT EXISTS hud_created_at toDateTime64(created_at, 9, 'UTC') TYPE minmax GRANULARITY 1;
ALTER TABLE workflow_job ADD INDEX IF NOT EXISTS hud_run_id run_id TYPE minmax GRANULARITY 1;
ALTER TABLE workflow_job MATERIALIZE INDEX hud_created_at;
ALTER TABLE workflow_job MATERIALIZE INDEX hud_run_id;

-- A downstream job (crcr_workflow_job's versions of it, the columns the
-- views read) under its HUD id: FINAL on an Int64 key, not on relay's
-- 64-character job id. The id is a hash: one partition and small granules,
-- so the few ids of a commit are a few granules, not one in every part of
-- every month (224 of 228 at a year with monthly parts). A job's run id is set when it starts and can change
-- (a job dispatched again runs in another run), so the views group a run's
-- jobs from their newest versions here, not by a key of run.
CREATE TABLE IF NOT EXISTS hud_downstream_job (
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
) ENGINE = ReplacingMergeTree(version)
ORDER BY id
SETTINGS index_granularity = 256;

CREATE MATERIALIZED VIEW IF NOT EXISTS hud_downstream_job_mv TO hud_downstream_job AS
SELECT relay_hud_job_id(id) AS id, toInt64OrZero(run_id) AS run, run_id, run_attempt, downstream_repo, head_sha,
       pr_number, workflow_run_url, workflow_name, job_name, status, conclusion, dispatched_at, started_at,
       completed_at, event_type, version
FROM crcr_workflow_job;

INSERT INTO hud_downstream_job
SELECT relay_hud_job_id(id) AS id, toInt64OrZero(run_id) AS run, run_id, run_attempt, downstream_repo, head_sha,
       pr_number, workflow_run_url, workflow_name, job_name, status, conclusion, dispatched_at, started_at,
       completed_at, event_type, version
FROM crcr_workflow_job;

-- The lookups, as tables. Upstream ids as default.workflow_job and
-- default.workflow_run give them; a downstream job's is relay_hud_job_id,
-- a downstream run's its run id, created at the job's dispatch.
DROP VIEW IF EXISTS materialized_views.workflow_job_by_head_sha;
CREATE TABLE IF NOT EXISTS materialized_views.workflow_job_by_head_sha (
  head_sha String,
  id Int64
) ENGINE = ReplacingMergeTree()
ORDER BY (head_sha, id);
CREATE MATERIALIZED VIEW IF NOT EXISTS hud_job_by_head_sha_mv TO materialized_views.workflow_job_by_head_sha AS
SELECT head_sha, toInt64(id) AS id FROM workflow_job;
CREATE MATERIALIZED VIEW IF NOT EXISTS hud_downstream_job_by_head_sha_mv TO materialized_views.workflow_job_by_head_sha AS
SELECT head_sha, relay_hud_job_id(id) AS id FROM crcr_workflow_job;
INSERT INTO materialized_views.workflow_job_by_head_sha
SELECT head_sha, toInt64(id) FROM workflow_job;
INSERT INTO materialized_views.workflow_job_by_head_sha
SELECT head_sha, relay_hud_job_id(id) FROM crcr_workflow_job;

DROP VIEW IF EXISTS materialized_views.workflow_job_by_created_at;
CREATE TABLE IF NOT EXISTS materialized_views.workflow_job_by_created_at (
  created_at DateTime64(9, 'UTC'),
  id Int64
) ENGINE = ReplacingMergeTree()
PARTITION BY toYYYYMM(created_at)
ORDER BY (created_at, id);
CREATE MATERIALIZED VIEW IF NOT EXISTS hud_job_by_created_at_mv TO materialized_views.workflow_job_by_created_at AS
SELECT toDateTime64(created_at, 9, 'UTC') AS created_at, toInt64(id) AS id FROM workflow_job;
CREATE MATERIALIZED VIEW IF NOT EXISTS hud_downstream_job_by_created_at_mv TO materialized_views.workflow_job_by_created_at AS
SELECT toDateTime64(dispatched_at, 9, 'UTC') AS created_at, relay_hud_job_id(id) AS id FROM crcr_workflow_job;
INSERT INTO materialized_views.workflow_job_by_created_at
SELECT toDateTime64(created_at, 9, 'UTC'), toInt64(id) FROM workflow_job;
INSERT INTO materialized_views.workflow_job_by_created_at
SELECT toDateTime64(dispatched_at, 9, 'UTC'), relay_hud_job_id(id) FROM crcr_workflow_job;

DROP VIEW IF EXISTS materialized_views.workflow_run_by_head_sha;
CREATE TABLE IF NOT EXISTS materialized_views.workflow_run_by_head_sha (
  head_sha String,
  id Int64
) ENGINE = ReplacingMergeTree()
ORDER BY (head_sha, id);
CREATE MATERIALIZED VIEW IF NOT EXISTS hud_run_by_head_sha_mv TO materialized_views.workflow_run_by_head_sha AS
SELECT head_sha, toInt64(id) AS id FROM workflow_run;
CREATE MATERIALIZED VIEW IF NOT EXISTS hud_downstream_run_by_head_sha_mv TO materialized_views.workflow_run_by_head_sha AS
SELECT head_sha, toInt64OrZero(run_id) AS id FROM crcr_workflow_job WHERE toInt64OrZero(run_id) != 0;
INSERT INTO materialized_views.workflow_run_by_head_sha
SELECT head_sha, toInt64(id) FROM workflow_run;
INSERT INTO materialized_views.workflow_run_by_head_sha
SELECT head_sha, toInt64OrZero(run_id) FROM crcr_workflow_job WHERE toInt64OrZero(run_id) != 0;

DROP VIEW IF EXISTS materialized_views.workflow_run_by_created_at;
CREATE TABLE IF NOT EXISTS materialized_views.workflow_run_by_created_at (
  created_at DateTime64(9, 'UTC'),
  id Int64
) ENGINE = ReplacingMergeTree()
PARTITION BY toYYYYMM(created_at)
ORDER BY (created_at, id);
CREATE MATERIALIZED VIEW IF NOT EXISTS hud_run_by_created_at_mv TO materialized_views.workflow_run_by_created_at AS
SELECT toDateTime64(created_at, 9, 'UTC') AS created_at, toInt64(id) AS id FROM workflow_run;
CREATE MATERIALIZED VIEW IF NOT EXISTS hud_downstream_run_by_created_at_mv TO materialized_views.workflow_run_by_created_at AS
SELECT toDateTime64(dispatched_at, 9, 'UTC') AS created_at, toInt64OrZero(run_id) AS id
FROM crcr_workflow_job WHERE toInt64OrZero(run_id) != 0;
INSERT INTO materialized_views.workflow_run_by_created_at
SELECT toDateTime64(created_at, 9, 'UTC'), toInt64(id) FROM workflow_run;
INSERT INTO materialized_views.workflow_run_by_created_at
SELECT toDateTime64(dispatched_at, 9, 'UTC'), toInt64OrZero(run_id) FROM crcr_workflow_job WHERE toInt64OrZero(run_id) != 0;


-- The per-test rows as the HUD reads them (its test tables: by run, then
-- job), the same rows as test_results (a row's versions share the whole
-- key, which is test_results' with the run and job first).
CREATE TABLE IF NOT EXISTS hud_test_runs (
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
) ENGINE = ReplacingMergeTree(version)
PARTITION BY toYYYYMM(day)
ORDER BY (workflow_id, job_id, repo, day, file, classname, name, upload_id, seq, idx);

CREATE MATERIALIZED VIEW IF NOT EXISTS hud_test_runs_mv TO hud_test_runs AS
SELECT toInt64OrZero(run_id) AS workflow_id, relay_hud_job_id(job_id) AS job_id, repo, day, file, classname, name,
       upload_id, seq, idx, run_attempt, duration, outcome, reruns, message, uploaded_at, version
FROM test_results;

INSERT INTO hud_test_runs
SELECT toInt64OrZero(run_id) AS workflow_id, relay_hud_job_id(job_id) AS job_id, repo, day, file, classname, name,
       upload_id, seq, idx, run_attempt, duration, outcome, reruns, message, uploaded_at, version
FROM test_results;

-- Migration 7's views over payloads (and migration 6's that parse theirs at
-- query time: reviews, label events), reading hud_deliveries instead of
-- webhook_deliveries; otherwise unchanged.

-- Migration 6's view, over hud_push.
CREATE OR REPLACE VIEW default.push AS
WITH hud_push AS p
SELECT p.ref AS ref, p.before AS before, p.after AS after, p.forced AS forced, p.compare AS compare,
       p.head_commit AS head_commit, p.commits AS commits, p.repository AS repository, delivery_id AS dynamoKey
FROM hud_deliveries FINAL
WHERE event = 'push';

-- Migration 6's view, over hud_pull_request.
CREATE OR REPLACE VIEW default.pull_request AS
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

-- Migration 6's view, over hud_issue.
CREATE OR REPLACE VIEW default.issues AS
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

-- Migration 6's view, over hud_issue_comment.
CREATE OR REPLACE VIEW default.issue_comment AS
WITH hud_issue_comment AS c
SELECT c.id AS id, c.body AS body, c.html_url AS html_url, c.issue_url AS issue_url,
       c.author_association AS author_association, c.created_at AS created_at, c.updated_at AS updated_at,
       c.user AS user, repo AS repository_full_name, concat(repo, '/', toString(c.id)) AS dynamoKey
FROM hud_deliveries FINAL
WHERE event = 'issue_comment'
ORDER BY received_at_ms DESC, delivery_id
LIMIT 1 BY repo, id;

-- Migration 6's view, over hud_pull_request (a superset of the fields it parsed).
CREATE OR REPLACE VIEW default.merges AS
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

-- Migration 4's view, over hud_issue (a superset of the fields it parsed).
CREATE OR REPLACE VIEW misc.disabled_tests_historical AS
WITH hud_issue AS i
SELECT
  toDate(received_at) AS day,
  received_at AS timestamp,
  trim(substring(i.title, 10)) AS name,
  toInt32(i.number) AS issueNumber,
  arrayFilter(x -> x != '', arrayMap(x -> lower(trim(x)), splitByChar(',', extract(i.body, '(?mi)^\\s*platforms:\\s*([^\\r\\n]*)')))) AS platforms
FROM hud_deliveries FINAL
WHERE event = 'issues' AND startsWith(i.title, 'DISABLED ');

-- Pull request reviews: one row per review, its newest delivery.
CREATE OR REPLACE VIEW default.pull_request_review AS
WITH JSONExtract(payload, 'review',
  'Tuple(id Int64, state String, body String, html_url String, pull_request_url String, author_association String,
         submitted_at Nullable(DateTime64(9, \'UTC\')), user Tuple(login String))') AS r
SELECT r AS review, JSONExtractString(payload, 'action') AS action,
       concat(repo, '/', toString(r.id)) AS dynamoKey
FROM hud_deliveries FINAL
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
FROM hud_deliveries FINAL
WHERE event = 'issues' AND action IN ('labeled', 'unlabeled');

CREATE OR REPLACE VIEW default.pull_label_event AS
SELECT toDateTime64(received_at, 3, 'UTC') AS event_time, action, repo AS repo_name,
       JSONExtractInt(payload, 'pull_request', 'number') AS pr_number,
       JSONExtractString(payload, 'label', 'name') AS label_name,
       JSONExtractString(payload, 'sender', 'login') AS sender_login
FROM hud_deliveries FINAL
WHERE event = 'pull_request' AND action IN ('labeled', 'unlabeled');

-- Migration 7's default.workflow_run: the upstream runs from
-- hud_workflow_run (no join), the downstream from hud_downstream_job.
CREATE OR REPLACE VIEW default.workflow_run AS
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

-- Migration 6's default.workflow_job: the downstream jobs from
-- hud_downstream_job, a downstream job's workflow_created_at its own
-- dispatch (below).
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
    c.id, c.run, toInt64(greatest(toUInt32OrZero(c.run_attempt), 1)),
    if(c.job_name = '', c.workflow_name, c.job_name), c.workflow_name, c.head_sha, '',
    c.status, if(c.status = 'completed', c.conclusion, ''), c.workflow_run_url, c.downstream_repo,
    c.dispatched_at, c.started_at, c.completed_at,
    [], 0, '', '',
    [], [], [], [], [], [],
    c.event_type,
    -- the downstream run's creation: the dispatch that made it, this job's
    -- (migrations 4-7: the earliest dispatch of the jobs now in its run, the
    -- same for the jobs of one dispatch; a window over every downstream job)
    c.dispatched_at,
    greatest(c.dispatched_at, c.started_at, c.completed_at)
  FROM hud_downstream_job AS c FINAL
);

-- Migration 6's default.test_run_s3 (and so default.test_run_summary and
-- tests.all_test_runs), over hud_test_runs.
CREATE OR REPLACE VIEW default.test_run_s3 AS
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
