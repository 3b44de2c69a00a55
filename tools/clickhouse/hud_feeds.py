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
