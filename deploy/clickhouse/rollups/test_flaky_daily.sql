-- Snapshots one window's flaky tests from test_daily (computed just before, same version).
-- param: day Date 2026-11-01
-- param: repo String
-- param: version UInt64 0
INSERT INTO test_flaky_daily (day, repo, file, classname, name, runs, failed, rerun_passed, flaky_shas, computed_at_ms)
SELECT day, repo, file, classname, name, runs, failed, rerun_passed, flaky_shas, {version:UInt64}
FROM test_daily FINAL
WHERE day = {day:Date} AND repo = {repo:String} AND (flaky_shas > 0 OR rerun_passed > 0)
