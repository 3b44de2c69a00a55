-- Recomputes test_daily for one day of one downstream repo from the deduplicated raw rows.
-- param: day Date 2026-11-01
-- param: repo String
-- param: version UInt64 0
--
-- Raw rows read with FINAL (a replayed row counts once); the upstream sha
-- of each run comes from its dispatch (by delivery id), and a test is flaky
-- on a sha when it both passed and failed there. version: when the
-- computation began (ms), so the newest computation replaces older ones.
INSERT INTO test_daily (day, repo, file, classname, name, runs, passed, failed, skipped, rerun_passed,
                        flaky_shas, duration_sum, duration_max, computed_at_ms)
SELECT
    day, repo, file, classname, name,
    sum(n), sum(p), sum(f), sum(s), sum(rp),
    sum(p > 0 AND f > 0 AND head_sha != ''),
    sum(ds), max(dm),
    {version:UInt64}
FROM
(
    SELECT
        day, repo, file, classname, name, head_sha,
        count() AS n,
        countIf(outcome = 'passed') AS p,
        countIf(outcome IN ('failed', 'error')) AS f,
        countIf(outcome = 'skipped') AS s,
        countIf(outcome = 'passed' AND reruns > 0) AS rp,
        sum(duration) AS ds,
        max(duration) AS dm
    FROM
    (
        SELECT day, repo, file, classname, name, delivery_id, outcome, reruns, duration
        FROM test_results FINAL
        WHERE day = {day:Date} AND repo = {repo:String}
    ) AS runs
    ANY LEFT JOIN
    (
        SELECT delivery_id, any(head_sha) AS head_sha
        FROM dispatches FINAL
        WHERE downstream_repo = {repo:String}
        GROUP BY delivery_id
    ) AS shas USING delivery_id
    GROUP BY day, repo, file, classname, name, head_sha
) AS per_sha
GROUP BY day, repo, file, classname, name
