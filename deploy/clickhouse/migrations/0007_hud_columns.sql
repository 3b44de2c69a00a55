-- relay's ClickHouse schema, migration 7: what the HUD's views parse from
-- webhook payloads, parsed once when the delivery is written.
--
-- requires: ClickHouse >= 23.3
-- (the views below are migration 6's, which need it; materialized columns
-- of named tuples with DateTime64.) On an older server `relay-stats migrate`
-- skips this migration, as it skips 4 and 6.
--
-- Migrations 4 and 6 parse the raw payload (webhook_deliveries.payload) at
-- query time, in every view over it. Each such view reads, with FINAL, the
-- payload column of every delivery of every event (FINAL reads before
-- filtering on event), most of them workflow_job deliveries no view parses:
-- at a PyTorch week (2.2 M deliveries, 16 GiB of JSON) a page's query spent
-- seconds decompressing and parsing payloads (docs/benchmarks.md, "The
-- PyTorch HUD's queries on a PyTorch week"). Here each typed tuple a view reads is a
-- MATERIALIZED column of webhook_deliveries, computed from the payload when
-- the row is inserted (relay-stats' inserts name their columns, so they are
-- unchanged), empty (the tuple's defaults) on deliveries of other events;
-- the views read the column instead of the payload. The payload itself is
-- kept, for everything else.
--
-- Rows written before this migration: MATERIALIZE COLUMN rewrites them (a
-- mutation, in the background; until it is done a read computes the column
-- from the payload, as before, so the views are right all along, only not
-- yet faster). The views' rows are the same as migration 6's: each tuple's
-- type is the one its view parsed into.


ALTER TABLE webhook_deliveries ADD COLUMN IF NOT EXISTS hud_workflow_run
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

ALTER TABLE webhook_deliveries ADD COLUMN IF NOT EXISTS hud_push
  Tuple(ref String, before String, after String, forced Bool, compare String,
         head_commit Tuple(id String, message String, timestamp DateTime64(9, 'UTC'), tree_id String, url String, author Tuple(email String, name String, username String)),
         commits Array(Tuple(id String, message String, timestamp DateTime64(9, 'UTC'), tree_id String, url String, author Tuple(email String, name String, username String), added Array(String), removed Array(String), modified Array(String))),
         repository Tuple(full_name String, name String, owner Tuple(name String, login String)))
  MATERIALIZED JSONExtract(if(event = 'push', payload, ''), 'Tuple(ref String, before String, after String, forced Bool, compare String,
         head_commit Tuple(id String, message String, timestamp DateTime64(9, \'UTC\'), tree_id String, url String, author Tuple(email String, name String, username String)),
         commits Array(Tuple(id String, message String, timestamp DateTime64(9, \'UTC\'), tree_id String, url String, author Tuple(email String, name String, username String), added Array(String), removed Array(String), modified Array(String))),
         repository Tuple(full_name String, name String, owner Tuple(name String, login String)))');

ALTER TABLE webhook_deliveries ADD COLUMN IF NOT EXISTS hud_pull_request
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

ALTER TABLE webhook_deliveries ADD COLUMN IF NOT EXISTS hud_issue
  Tuple(number Int64, title String, state String, html_url String, body String, created_at String, updated_at String,
         closed_at String, repository_url String, author_association String, assignee Tuple(login String),
         labels Array(Tuple(name String)), user Tuple(login String), pull_request Tuple(url String))
  MATERIALIZED JSONExtract(if(event = 'issues', payload, ''), 'issue', 'Tuple(number Int64, title String, state String, html_url String, body String, created_at String, updated_at String,
         closed_at String, repository_url String, author_association String, assignee Tuple(login String),
         labels Array(Tuple(name String)), user Tuple(login String), pull_request Tuple(url String))');

ALTER TABLE webhook_deliveries ADD COLUMN IF NOT EXISTS hud_issue_comment
  Tuple(id Int64, body String, html_url String, issue_url String, author_association String,
         created_at DateTime64(9, 'UTC'), updated_at DateTime64(9, 'UTC'), user Tuple(login String, type String))
  MATERIALIZED JSONExtract(if(event = 'issue_comment', payload, ''), 'comment', 'Tuple(id Int64, body String, html_url String, issue_url String, author_association String,
         created_at DateTime64(9, \'UTC\'), updated_at DateTime64(9, \'UTC\'), user Tuple(login String, type String))');

-- The rows written before this migration (see above).
ALTER TABLE webhook_deliveries MATERIALIZE COLUMN hud_workflow_run;
ALTER TABLE webhook_deliveries MATERIALIZE COLUMN hud_push;
ALTER TABLE webhook_deliveries MATERIALIZE COLUMN hud_pull_request;
ALTER TABLE webhook_deliveries MATERIALIZE COLUMN hud_issue;
ALTER TABLE webhook_deliveries MATERIALIZE COLUMN hud_issue_comment;

-- Migration 6's view, over hud_push.
CREATE OR REPLACE VIEW default.push AS
WITH hud_push AS p
SELECT p.ref AS ref, p.before AS before, p.after AS after, p.forced AS forced, p.compare AS compare,
       p.head_commit AS head_commit, p.commits AS commits, p.repository AS repository, delivery_id AS dynamoKey
FROM webhook_deliveries FINAL
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
FROM webhook_deliveries FINAL
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
FROM webhook_deliveries FINAL
WHERE event = 'issues'
ORDER BY received_at_ms DESC, delivery_id
LIMIT 1 BY repo, number;

-- Migration 6's view, over hud_issue_comment.
CREATE OR REPLACE VIEW default.issue_comment AS
WITH hud_issue_comment AS c
SELECT c.id AS id, c.body AS body, c.html_url AS html_url, c.issue_url AS issue_url,
       c.author_association AS author_association, c.created_at AS created_at, c.updated_at AS updated_at,
       c.user AS user, repo AS repository_full_name, concat(repo, '/', toString(c.id)) AS dynamoKey
FROM webhook_deliveries FINAL
WHERE event = 'issue_comment'
ORDER BY received_at_ms DESC, delivery_id
LIMIT 1 BY repo, id;

-- Migration 6's view, over hud_workflow_run (p); the downstream runs' p
-- is made as migration 6 made their payload, then parsed (a few bytes).
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
FROM webhook_deliveries FINAL
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
FROM webhook_deliveries FINAL
WHERE event = 'issues' AND startsWith(i.title, 'DISABLED ');
