"""Row checks of the HUD tables relay feeds from webhook payloads and its own
tables (migration 6), for tools/clickhouse/check-hud.

Each check reads what a HUD table must hold from relay's own tables in the
chDB session (webhook_deliveries' payloads parsed here, in Python, not by
the views' SQL), compares it with the HUD table, and runs the HUD queries
that read it. Where the dev stack's data has no row of a kind (its corpus
has no pull request GitHub merged), the check adds one to the session's
copy, made from a delivery of the data, and says so.
"""

import json


def deliveries(sess, rows, event, action=None):
    """relay's deliveries of EVENT (and ACTION), newest first, payloads parsed."""
    got = rows(sess, "SELECT delivery_id, action, repo, received_at_ms, payload FROM relay.webhook_deliveries FINAL "
                     "WHERE event = {e:String} AND ({a:String} = '' OR action = {a:String}) "
                     "ORDER BY received_at_ms DESC, delivery_id", {"e": event, "a": action or ""})
    for r in got:
        r["payload"] = json.loads(r["payload"])
    return got


def add_merged_pr(sess, rows):
    """Adds to the session's relay.webhook_deliveries a copy of its newest
    `closed` pull_request delivery that GitHub merged (merged true, a merge
    commit, merged_by), under a new delivery id. Returns (repo, number,
    merge commit) or None when the data has no closed pull request."""
    closed = deliveries(sess, rows, "pull_request", "closed")
    if not closed:
        return None
    src = closed[0]
    p = src["payload"]
    pr = p["pull_request"]
    sha = "c0ffee" + pr["head"]["sha"][6:]
    pr.update({"merged": True, "merge_commit_sha": sha, "merged_by": {"login": "check-hud"},
               "merged_at": pr.get("closed_at") or "2026-01-01T00:00:00Z"})
    sess.query("INSERT INTO relay.webhook_deliveries SELECT 'check-hud-merged-pr', event, action, repo, repository_id, "
               "installation_id, received_at, received_at_ms + 1, body_sha256, content_type, {p:String}, version "
               "FROM relay.webhook_deliveries FINAL WHERE delivery_id = {d:String} LIMIT 1", "CSV",
               params={"p": json.dumps(p), "d": src["delivery_id"]})
    return src["repo"], pr["number"], sha


def check_merges(sess, check, rows, hud_sql, same):
    """default.merges: one row per pull request GitHub closed as merged,
    the bot's fields at their defaults; pr_merge_commits finds its merge
    commit and filter_forced_merge_pr (the HUD's front page) no forced merge."""
    added = add_merged_pr(sess, rows)
    if added is None:
        check.report(False, "merges", "no closed pull_request delivery in the data to make a merged one from")
        return
    newest = {}
    for d in deliveries(sess, rows, "pull_request", "closed"):
        pr = d["payload"]["pull_request"]
        newest.setdefault((d["repo"], pr["number"]), pr)
    want = [(repo.split("/")[0], repo.split("/")[1], n, pr["merge_commit_sha"])
            for (repo, n), pr in newest.items() if pr.get("merged")]
    got = rows(sess, "SELECT owner, project, pr_num, merge_commit_sha, skip_mandatory_checks, ignore_current, "
                     "is_failed, length(failed_checks) + length(pending_checks) + length(ignore_current_checks) AS "
                     "checks FROM default.merges")
    if not same(check, "merges", [(g["owner"], g["project"], int(g["pr_num"]), g["merge_commit_sha"]) for g in got],
                want, f"{len(got)} pull requests GitHub merged (one added to the copy: the dev corpus has none)"):
        return
    bot = [g for g in got if g["skip_mandatory_checks"] or g["ignore_current"] or g["is_failed"] or int(g["checks"])]
    check.report(not bot, "merges (the bot's fields)", "no forced merge, no checks: relay has no merge bot's record"
                 if not bot else f"{bot}")
    repo, number, sha = added
    owner, project = repo.split("/")
    commits = rows(sess, hud_sql("pr_merge_commits"), {"pr_nums": f"[{number}]", "owner": owner, "project": project})
    check.report([(int(c["pr_num"]), c["merge_commit_sha"]) for c in commits] == [(number, sha)], "pr_merge_commits",
                 f"PR #{number} of {repo}: merge commit {sha[:12]}" if commits else "no rows")
    forced = rows(sess, hud_sql("filter_forced_merge_pr"), {"owner": owner, "project": project, "shas": f"['{sha}']"})
    check.report(forced == [], "filter_forced_merge_pr", "runs (the HUD's front page calls it); no forced merge"
                 if not forced else f"{forced}")


def newest(ds, key):
    """The first (newest) delivery of each KEY(delivery), in order."""
    out = {}
    for d in ds:
        out.setdefault(key(d), d)
    return list(out.values())


def g(obj, *path, default=""):
    """obj[path...], DEFAULT where a step is missing or null."""
    for p in path:
        if not isinstance(obj, dict) or obj.get(p) is None:
            return default
        obj = obj[p]
    return obj


def check_payload_tables(sess, check, rows, same):
    """The HUD tables made from webhook payloads, against the deliveries
    parsed here: issue_comment, pull_request_review, the label events, and
    the columns migration 6 adds to push, pull_request, issues and
    workflow_run."""
    comments = newest(deliveries(sess, rows, "issue_comment"), lambda d: (d["repo"], d["payload"]["comment"]["id"]))
    want = [(d["payload"]["comment"]["id"], g(d["payload"], "comment", "issue_url"),
             g(d["payload"], "comment", "author_association"), g(d["payload"], "comment", "user", "login"),
             g(d["payload"], "comment", "body")) for d in comments]
    got = rows(sess, "SELECT id, issue_url, author_association, user.login AS login, body FROM default.issue_comment")
    same(check, "issue_comment", [(int(r["id"]), r["issue_url"], r["author_association"], r["login"], r["body"])
                                  for r in got], want, f"{len(got)} comments, the newest delivery of each")

    reviews = newest(deliveries(sess, rows, "pull_request_review"), lambda d: (d["repo"], d["payload"]["review"]["id"]))
    want = [(d["payload"]["review"]["id"], g(d["payload"], "review", "state"), g(d["payload"], "review", "user", "login"),
             g(d["payload"], "review", "pull_request_url")) for d in reviews]
    got = rows(sess, "SELECT review.id AS id, review.state AS state, review.user.login AS login, "
                     "review.pull_request_url AS url FROM default.pull_request_review")
    same(check, "pull_request_review", [(int(r["id"]), r["state"], r["login"], r["url"]) for r in got], want,
         f"{len(got)} reviews, the newest delivery of each")

    for event, table, number in (("issues", "issues_label_event", "issue_number"),
                                 ("pull_request", "pull_label_event", "pr_number")):
        key = "issue" if event == "issues" else "pull_request"
        want = [(d["repo"], d["payload"][key]["number"], g(d["payload"], "label", "name"), d["action"])
                for d in deliveries(sess, rows, event) if d["action"] in ("labeled", "unlabeled")]
        got = rows(sess, f"SELECT repo_name, {number} AS n, label_name, action FROM default.{table}")
        same(check, table, [(r["repo_name"], int(r["n"]), r["label_name"], r["action"]) for r in got], want,
             f"{len(got)} labeled/unlabeled deliveries of {event}")

    pushes = deliveries(sess, rows, "push")
    want = [(d["delivery_id"], len(d["payload"].get("commits") or []), g(d["payload"], "head_commit", "url"),
             [c["id"] for c in d["payload"].get("commits") or []]) for d in pushes]
    got = rows(sess, "SELECT dynamoKey, length(commits) AS n, head_commit.url AS url, "
                     "arrayMap(c -> c.id, commits) AS ids FROM default.push")
    same(check, "push (commits, head_commit.url)", [(r["dynamoKey"], int(r["n"]), r["url"], r["ids"]) for r in got],
         want, f"{len(got)} pushes, {sum(w[1] for w in want)} commits")

    prs = newest(deliveries(sess, rows, "pull_request"), lambda d: (d["repo"], d["payload"]["pull_request"]["number"]))
    want = [(d["repo"], p["number"], bool(g(p, "draft", default=False)), bool(g(p, "merged", default=False)),
             g(p, "merged_by", "login"), g(p, "auto_merge", "merge_method"), g(p, "base", "repo", "full_name"),
             g(p, "author_association")) for d in prs for p in [d["payload"]["pull_request"]]]
    got = rows(sess, "SELECT repository_full_name AS repo, number, draft, merged, merged_by.login AS merged_by, "
                     "auto_merge.merge_method AS auto_merge, base.repo.full_name AS base_repo, author_association "
                     "FROM default.pull_request")
    same(check, "pull_request (draft, merged, merged_by, auto_merge, base.repo)",
         [(r["repo"], int(r["number"]), bool(r["draft"]), bool(r["merged"]), r["merged_by"], r["auto_merge"],
           r["base_repo"], r["author_association"]) for r in got], want, f"{len(got)} pull requests, the newest of each")

    issues = newest(deliveries(sess, rows, "issues"), lambda d: (d["repo"], d["payload"]["issue"]["number"]))
    want = [(d["repo"], d["payload"]["issue"]["number"], g(d["payload"], "issue", "repository_url"),
             g(d["payload"], "issue", "author_association")) for d in issues]
    got = rows(sess, "SELECT repository_full_name AS repo, number, repository_url, author_association FROM default.issues")
    same(check, "issues (repository_url, author_association)",
         [(r["repo"], int(r["number"]), r["repository_url"], r["author_association"]) for r in got], want,
         f"{len(got)} issues, the newest of each")

    # workflow_run.path: the payload of the delivery each run's latest attempt came from.
    paths = {d["delivery_id"]: g(d["payload"], "workflow_run", "path") for d in deliveries(sess, rows, "workflow_run")}
    runs = rows(sess, "SELECT id, argMax(delivery_id, run_attempt) AS delivery_id FROM relay.workflow_run FINAL GROUP BY id")
    want = [(int(r["id"]), paths.get(r["delivery_id"], "")) for r in runs]
    got = rows(sess, "SELECT id, path FROM default.workflow_run WHERE id IN (SELECT id FROM relay.workflow_run)")
    same(check, "workflow_run (path)", [(int(r["id"]), r["path"]) for r in got], want,
         f"{len(got)} upstream runs, the workflow file of each")


def check_job_columns(sess, check, rows, same, hud_id):
    """default.workflow_job's workflow_created_at and _inserted_at, and the
    lookup views, against relay's own tables."""
    up = rows(sess, "SELECT j.id AS id, toUnixTimestamp(j.received_at) AS inserted, "
                    "toUnixTimestamp(r.created) AS created, toUnixTimestamp(j.completed_at) AS completed "
                    "FROM relay.workflow_job AS j FINAL LEFT JOIN (SELECT id, min(created_at) AS created "
                    "FROM relay.workflow_run FINAL GROUP BY id) AS r ON r.id = j.run_id")
    down = rows(sess, "SELECT id, downstream_repo, run_id, toUnixTimestamp(dispatched_at) AS d, "
                      "toUnixTimestamp(started_at) AS s, toUnixTimestamp(completed_at) AS c "
                      "FROM relay.crcr_workflow_job FINAL")
    # A downstream job's run was made by the dispatch of the job (migration 8).
    want = [(int(u["id"]), int(u["created"] or 0), int(u["inserted"])) for u in up] + \
        [(hud_id(c["id"]), int(c["d"]), int(max(c["d"], c["s"], c["c"]))) for c in down]
    got = rows(sess, "SELECT id, toUnixTimestamp(workflow_created_at) AS created, toUnixTimestamp(_inserted_at) AS "
                     "inserted FROM default.workflow_job")
    same(check, "workflow_job (workflow_created_at, _inserted_at)",
         [(int(r["id"]), int(r["created"]), int(r["inserted"])) for r in got], want,
         f"{len(up)} upstream and {len(down)} downstream jobs")

    want = [(int(u["id"]), int(u["completed"])) for u in up] + [(hud_id(c["id"]), int(c["c"])) for c in down]
    got = rows(sess, "SELECT id, toUnixTimestamp(completed_at) AS c FROM materialized_views.workflow_job_by_completed_at")
    same(check, "materialized_views.workflow_job_by_completed_at", [(int(r["id"]), int(r["c"])) for r in got], want,
         f"{len(got)} jobs")

    # An upstream run's PRs are those of its latest attempt's newest delivery
    # (the highest version). Two deliveries of one run can tie on it (same
    # attempt, status and updated_at) and still differ (the example payloads
    # do, run 289782451: one lists PR 2, one none); each table keeps one of
    # them, not necessarily the same: the PRs of any delivery tied with the
    # row relay.workflow_run kept are accepted.
    kept = {int(r["id"]): r for r in rows(sess, "SELECT id, argMax(pull_request_numbers, version) AS prs, "
                                                 "argMax(status, version) AS status, "
                                                 "argMax(toUnixTimestamp(updated_at), version) AS u, "
                                                 "argMax(run_attempt, version) AS a "
                                                 "FROM relay.workflow_run FINAL GROUP BY id")}
    tied = {i: [sorted(int(n) for n in r["prs"])] for i, r in kept.items()}
    for d in rows(sess, "SELECT JSONExtractInt(payload, 'workflow_run', 'id') AS id, "
                        "JSONExtractString(payload, 'workflow_run', 'status') AS status, "
                        "toUnixTimestamp(parseDateTimeBestEffortOrZero(JSONExtractString(payload, 'workflow_run', 'updated_at'))) AS u, "
                        "JSONExtractInt(payload, 'workflow_run', 'run_attempt') AS a, "
                        "arrayMap(x -> JSONExtractInt(x, 'number'), JSONExtractArrayRaw(payload, 'workflow_run', 'pull_requests')) AS prs "
                        "FROM relay.webhook_deliveries WHERE event = 'workflow_run'"):
        k = kept.get(int(d["id"]))
        if k and (d["status"], int(d["u"]), int(d["a"])) == (k["status"], int(k["u"]), int(k["a"])):
            tied[int(d["id"])].append(sorted(int(n) for n in d["prs"]))
    # A downstream run's PR is its latest attempt's jobs' (argMax by attempt).
    # Its jobs can disagree: one whose callbacks all came before its dispatch
    # record has PR 0, the others the PR. argMax then picks either, in the
    # order it reads rows, which differs between two tables: any PR of the
    # latest attempt's jobs is accepted (none, when one of them has 0).
    down = rows(sess, "SELECT toInt64OrZero(run_id) AS id, max(toUInt32OrZero(run_attempt)) AS a, "
                      "groupUniqArray((toUInt32OrZero(run_attempt), pr_number)) AS ap "
                      "FROM relay.crcr_workflow_job FINAL WHERE toInt64OrZero(run_id) != 0 GROUP BY downstream_repo, run_id")
    got = [(int(r["id"]), int(r["pr_number"]))
           for r in rows(sess, "SELECT id, pr_number FROM materialized_views.workflow_run_by_pr_num")]
    shown_by_run = {}
    for i, pr in got:
        shown_by_run.setdefault(i, []).append(pr)
    want = []
    for run_id, lists in tied.items():
        shown = sorted(shown_by_run.get(run_id, []))
        want += [(run_id, n) for n in (shown if shown in lists else lists[0])]
    for d in down:
        prs = {int(pr) for attempt, pr in d["ap"] if int(attempt) == int(d["a"])}
        shown = [pr for pr in shown_by_run.get(int(d["id"]), []) if pr in prs]
        if shown:
            want.append((int(d["id"]), shown[0]))
        elif 0 not in prs:
            want.append((int(d["id"]), min(prs)))
    same(check, "materialized_views.workflow_run_by_pr_num", got, want, f"{len(got)} (run, pull request) pairs")

    want = [(g(d["payload"], "head_commit", "id"), g(d["payload"], "head_commit", "timestamp")[:19].replace("T", " "))
            for d in deliveries(sess, rows, "push")]
    got = rows(sess, "SELECT id, formatDateTime(timestamp, '%Y-%m-%d %H:%i:%S', 'UTC') AS t FROM materialized_views.push_by_sha")
    same(check, "materialized_views.push_by_sha", [(r["id"], r["t"] if r["id"] else "") for r in got],
         [(i, t) for i, t in want], f"{len(got)} pushes")

    prs = newest(deliveries(sess, rows, "pull_request"), lambda d: (d["repo"], d["payload"]["pull_request"]["number"]))
    want = [(g(d["payload"], "pull_request", "head", "sha"), d["payload"]["pull_request"]["number"]) for d in prs]
    got = rows(sess, "SELECT head_sha, number FROM materialized_views.pr_by_sha")
    same(check, "materialized_views.pr_by_sha", [(r["head_sha"], int(r["number"])) for r in got], want,
         f"{len(got)} pull requests")

    check_lookup_tables(sess, check, rows, same, hud_id)
    check_run_rows(sess, check, rows, same)


def check_run_rows(sess, check, rows, same):
    """Migration 8's hud_workflow_run makes a run's row from its delivery in
    SQL, as relay-stats makes relay.workflow_run's in C++ (rows.cc): the
    upstream rows of default.workflow_run must be relay.workflow_run's
    latest attempt of each run, field by field."""
    fields = ("name, event, head_sha, head_branch, status, conclusion, html_url, run_attempt, run_number, workflow_id, "
              "toUnixTimestamp(created_at) AS c, toUnixTimestamp(updated_at) AS u, toUnixTimestamp(run_started_at) AS s, "
              "{r} AS repo, {h} AS head_repo")
    want = rows(sess, "SELECT toInt64(id) AS id, " + fields.format(r="repository_full_name", h="head_repository_full_name") +
                " FROM relay.workflow_run FINAL ORDER BY id, run_attempt DESC LIMIT 1 BY id")
    got = rows(sess, "SELECT id, " + fields.format(r="repository.full_name", h="head_repository.full_name") +
               " FROM default.workflow_run WHERE id IN (SELECT toInt64(id) FROM relay.workflow_run)")

    def key(r):
        return tuple(str(r[k]) for k in ("id", "name", "event", "head_sha", "head_branch", "status", "conclusion",
                                         "html_url", "run_attempt", "run_number", "workflow_id", "c", "u", "s",
                                         "repo", "head_repo"))
    same(check, "workflow_run (the run's fields, made from its delivery)", [key(r) for r in got],
         [key(r) for r in want], f"{len(got)} upstream runs, the latest attempt of each")


def run_number(text):
    """A downstream run id as the HUD's Int64 (0: none)."""
    return int(text) if text.isdigit() else 0


def check_lookup_tables(sess, check, rows, same, hud_id):
    """Migration 8's lookup tables (materialized_views.*, filled as relay
    writes): every (id, key) pair a job or run of relay's tables has had,
    once each (a lookup may hold a pair twice; an IN does not care). A
    downstream job's id is made here apart (hud_id); its run is its run id,
    created at each job's dispatch."""
    jobs = rows(sess, "SELECT DISTINCT id, head_sha, toUnixTimestamp(created_at) AS t FROM relay.workflow_job")
    runs = rows(sess, "SELECT DISTINCT id, head_sha, toUnixTimestamp(created_at) AS t FROM relay.workflow_run")
    down = rows(sess, "SELECT DISTINCT id, run_id, head_sha, toUnixTimestamp(dispatched_at) AS t "
                      "FROM relay.crcr_workflow_job")
    for table, want in (
            ("workflow_job_by_head_sha", [(int(j["id"]), j["head_sha"]) for j in jobs] +
             [(hud_id(d["id"]), d["head_sha"]) for d in down]),
            ("workflow_job_by_created_at", [(int(j["id"]), int(j["t"])) for j in jobs] +
             [(hud_id(d["id"]), int(d["t"])) for d in down]),
            ("workflow_run_by_head_sha", [(int(r["id"]), r["head_sha"]) for r in runs] +
             [(run_number(d["run_id"]), d["head_sha"]) for d in down if run_number(d["run_id"])]),
            ("workflow_run_by_created_at", [(int(r["id"]), int(r["t"])) for r in runs] +
             [(run_number(d["run_id"]), int(d["t"])) for d in down if run_number(d["run_id"])])):
        key = "head_sha" if table.endswith("head_sha") else "toUnixTimestamp(created_at)"
        got = rows(sess, f"SELECT DISTINCT id, {key} AS k FROM materialized_views.{table}")
        got = [(int(r["id"]), r["k"] if key == "head_sha" else int(r["k"])) for r in got]
        same(check, f"materialized_views.{table}", got, sorted(set(want)), f"{len(got)} (id, key) pairs")


def check_tests(sess, check, rows, same, hud_id, hud_sql):
    """The test tables against relay.test_results (the rows the session
    copied: check-hud leaves out passed cases), and two HUD queries over them."""
    results = rows(sess, "SELECT job_id, run_id, run_attempt, file, classname, name, duration, outcome, reruns, message, "
                         "toUnixTimestamp(uploaded_at) AS t FROM relay.test_results FINAL")
    want = [(r["name"], r["classname"], r["file"], hud_id(r["job_id"]), int(r["run_id"] or 0),
             max(int(r["run_attempt"] or 0), 1), int(r["outcome"] == "failed"), int(r["outcome"] == "error"),
             int(r["outcome"] == "skipped"), int(r["reruns"]), r["message"] if r["outcome"] == "failed" else None)
            for r in results]
    for table in ("default.test_run_s3", "default.test_run_summary", "tests.all_test_runs"):
        got = rows(sess, "SELECT name, classname, invoking_file, job_id, workflow_id, workflow_run_attempt, "
                         "failure_count, error_count, skipped_count, rerun_count, "
                         f"if(length(failure) = 1, failure[1].message, NULL) AS failure FROM {table}")
        same(check, table, [(r["name"], r["classname"], r["invoking_file"], int(r["job_id"]), int(r["workflow_id"]),
                             int(r["workflow_run_attempt"]), int(r["failure_count"]), int(r["error_count"]),
                             int(r["skipped_count"]), int(r["rerun_count"]), r["failure"]) for r in got], want,
             f"{len(got)} test cases (failed and skipped: the copy leaves out passed ones)")
    last = {}
    for r in results:
        k = (r["name"], r["classname"], r["file"])
        last[k] = max(last.get(k, 0), int(r["t"]))
    got = rows(sess, "SELECT name, classname, invoking_file, toUnixTimestamp(maxMerge(last_run)) AS t "
                     "FROM tests.distinct_names GROUP BY name, classname, invoking_file")
    same(check, "tests.distinct_names", [(r["name"], r["classname"], r["invoking_file"], int(r["t"])) for r in got],
         [k + (t,) for k, t in last.items()], f"{len(got)} test names, each with its last run")

    failed = [r for r in results if r["outcome"] == "failed" and int(r["run_id"] or 0)]
    if not failed:
        check.report(False, "tests/test_on_commit", "no failed test case with a run in the data")
        return
    f = min(failed, key=lambda r: (r["run_id"], r["job_id"], r["name"]))
    job = rows(sess, "SELECT name FROM default.workflow_job WHERE id = {i:Int64}", {"i": hud_id(f["job_id"])})
    got = rows(sess, hud_sql("tests/test_on_commit"), {
        "workflowId": f["run_id"], "runAttempt": str(max(int(f["run_attempt"] or 0), 1)),
        "jobName": job[0]["name"] if job else "", "testName": f["name"], "className": f["classname"],
        "invokingFile": f["file"]})
    ok = len(got) == 1 and int(got[0]["job_id"]) == hud_id(f["job_id"]) and \
        [x["message"] for x in got[0]["failure"]] == [f["message"]]
    check.report(ok, "tests/test_on_commit (one row by hand)",
                 f"{f['classname']}.{f['name']} failed in run {f['run_id']}: its failure message" if ok else f"{got}")
    got = rows(sess, hud_sql("testStatsSearch"), {"name": f["name"], "suite": f["classname"], "file": f["file"],
                                                  "per_page": "10", "offset": "0"})
    k = (f["name"], f["classname"], f["file"])
    ok = len(got) == 1 and (got[0]["name"], got[0]["classname"], got[0]["file"]) == k
    check.report(ok, "testStatsSearch (one row by hand)", f"finds {f['classname']}.{f['name']}" if ok else f"{got}")


def check_runner_cost(sess, check, rows, same, hud_sql):
    """misc.runner_cost against relay-lifecycle's usage events, and the
    duration page's query per node group."""
    q = ("SELECT event_id, team, node_group, provider, node_seconds, toUnixTimestamp(at) AS at "
         "FROM relay.cluster_events FINAL WHERE kind = 'usage' AND node_group != ''")
    usage = rows(sess, q)
    added = ""
    if not any(float(u["node_seconds"]) > 0 for u in usage):
        # tools/dev up runs check-hud before its lifecycle demo: a node
        # group may have no usage interval with nodes up yet.
        sess.query("INSERT INTO relay.cluster_events (event_id, cluster_id, team, kind, state, at, at_ms, node_group, "
                   "node_seconds, provider, version) VALUES ('check-hud-usage', 'check-hud', 'dev', 'usage', 'IDLE', "
                   "now(), toUnixTimestamp(now()) * 1000, 'runners', 120.5, 'local', 1)")
        usage = rows(sess, q)
        added = " (one added to the copy: the data has none with node-seconds yet)"
    want = [(u["event_id"], int(u["at"]), round(float(u["node_seconds"]), 3), u["team"], u["node_group"], u["provider"])
            for u in usage]
    got = rows(sess, "SELECT event_id, toUnixTimestamp(date) AS at, duration, owning_account, runner_type, provider, "
                     "cost FROM misc.runner_cost")
    if same(check, "misc.runner_cost", [(r["event_id"], int(r["at"]), round(float(r["duration"]), 3),
                                         r["owning_account"], r["runner_type"], r["provider"]) for r in got], want,
            f"{len(got)} usage intervals of node groups, node-seconds as duration{added}"):
        check.report(all(float(r["cost"]) == 0 for r in got), "misc.runner_cost (cost)", "0: relay knows no prices")
    teams = sorted({u["team"] for u in usage})
    providers = sorted({u["provider"] for u in usage})
    got = rows(sess, hud_sql("duration_job_per_runner_type"), {
        "granularity": "year", "startTime": "2000-01-01 00:00:00", "stopTime": "2100-01-01 00:00:00",
        "selectedRepos": str(teams), "selectedGPU": "[0]", "selectedPlatforms": "['']",
        "selectedProviders": str(providers), "selectedOwners": str(teams)})
    sums = {}
    for u in usage:
        if float(u["node_seconds"]) > 0:  # the page keeps duration > 0
            sums[u["node_group"]] = sums.get(u["node_group"], 0.0) + float(u["node_seconds"])
    ok = {r["runner_type"]: round(float(r["total_duration"]), 3) for r in got} == \
        {k: round(v, 3) for k, v in sums.items()}
    check.report(ok, "duration_job_per_runner_type (by hand)",
                 f"node-seconds per node group: {', '.join(f'{k} {v:.1f}' for k, v in sorted(sums.items()))}"
                 if ok else f"{got} / want {sums}")
