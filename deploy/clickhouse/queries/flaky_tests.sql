-- Flaky tests over the last {days} days: tests that both passed and failed on the same upstream commit, or passed only on a rerun.
-- param: days UInt32 14
-- param: repo String
-- param: limit UInt32 100
--
-- From the test_flaky_daily snapshots (each window's latest computation).
-- flaky_commits: commits (per day) with both outcomes; passed_on_rerun:
-- runs that passed after a rerun; runs and failed: on the days the test was
-- flaky. repo: one downstream repo, or '' for all.
-- FINAL: one computation's rows can land twice (a retried statement, or
-- two relay-stats computing a window in the same millisecond); the
-- table's key holds the computation, so FINAL keeps one copy.
SELECT
    repo,
    file,
    classname,
    name,
    sum(flaky_shas) AS flaky_commits,
    sum(rerun_passed) AS passed_on_rerun,
    sum(runs) AS total_runs,
    sum(failed) AS total_failed
FROM test_flaky_daily FINAL
WHERE day >= today() - {days:UInt32}
  AND ({repo:String} = '' OR repo = {repo:String})
  AND (repo, day, computed_at_ms) IN
      (SELECT repo, day, max(computed_at_ms) FROM test_flaky_daily
       WHERE day >= today() - {days:UInt32} AND ({repo:String} = '' OR repo = {repo:String})
       GROUP BY repo, day)
GROUP BY repo, file, classname, name
ORDER BY flaky_commits + passed_on_rerun DESC, repo, file, classname, name
LIMIT {limit:UInt32}
