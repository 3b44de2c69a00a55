-- Flaky tests over the last {days} days: tests that both passed and failed on the same upstream commit, or passed only on a rerun.
-- param: days UInt32 14
-- param: repo String
-- param: limit UInt32 100
--
-- From the test_daily rollup (never the raw per-test table). flaky_shas:
-- commits (per day) with both outcomes; rerun_passed: runs that passed
-- after a rerun. repo: one downstream repo, or '' for all.
SELECT
    repo,
    file,
    classname,
    name,
    sum(flaky_shas) AS flaky_commits,
    sum(rerun_passed) AS passed_on_rerun,
    sum(runs) AS runs,
    sum(failed) AS failed
FROM test_daily FINAL
WHERE day >= today() - {days:UInt32}
  AND ({repo:String} = '' OR repo = {repo:String})
  AND (flaky_shas > 0 OR rerun_passed > 0)
GROUP BY repo, file, classname, name
ORDER BY flaky_commits + passed_on_rerun DESC, repo, file, classname, name
LIMIT {limit:UInt32}
