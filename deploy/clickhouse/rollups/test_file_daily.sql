-- Recomputes test_file_daily for one day of one downstream repo from the deduplicated raw rows.
-- param: day Date 2026-11-01
-- param: repo String
-- param: version UInt64 0
INSERT INTO test_file_daily (day, repo, file, tests, uploads, runs, failed, skipped, duration_sum, computed_at_ms)
SELECT
    day, repo, file,
    uniqExact(classname, name),
    uniqExact(upload_id),
    count(),
    countIf(outcome IN ('failed', 'error')),
    countIf(outcome = 'skipped'),
    sum(toUInt64(round(duration * 1000000))) / 1000000,
    {version:UInt64}
FROM test_results FINAL
WHERE day = {day:Date} AND repo = {repo:String}
GROUP BY day, repo, file
