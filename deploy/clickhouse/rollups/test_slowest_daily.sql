-- Snapshots one window's 1,000 slowest tests (mean over runs not skipped) from test_daily (computed just before, same version).
-- param: day Date 2026-11-01
-- param: repo String
-- param: version UInt64 0
INSERT INTO test_slowest_daily (day, repo, file, classname, name, runs, duration_sum, duration_max, computed_at_ms)
SELECT day, repo, file, classname, name, runs - skipped AS timed_runs, duration_sum, duration_max, {version:UInt64}
FROM test_daily FINAL
WHERE day = {day:Date} AND repo = {repo:String} AND runs > skipped
ORDER BY duration_sum / (runs - skipped) DESC, file, classname, name
LIMIT 1000
