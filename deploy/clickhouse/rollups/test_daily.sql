-- Recomputes test_daily for one day of one downstream repo from the deduplicated raw rows.
-- param: day Date 2026-11-01
-- param: repo String
-- param: version UInt64 0
--
-- Raw rows read with FINAL (a replayed row counts once). The totals are one
-- pass over the window; durations are summed as integer microseconds, so the
-- sum does not depend on the order rows are added in. Flakiness needs each
-- run's upstream sha (from its dispatch, by delivery id; only the window's
-- deliveries are looked up) and is computed only for the tests
-- that failed in the window: a test is flaky on a sha when it both passed
-- and failed there. ALL INNER JOIN: every run of those tests meets its
-- delivery's one sha (the right side is one row per delivery). version:
-- when the computation began (ms), so the newest computation replaces older
-- ones.
INSERT INTO test_daily (day, repo, file, classname, name, runs, passed, failed, skipped, rerun_passed,
                        flaky_shas, duration_sum, duration_max, computed_at_ms)
SELECT
    day, repo, file, classname, name, runs, passed, failed, skipped, rerun_passed, flaky_shas,
    duration_sum, duration_max, {version:UInt64}
FROM
(
    SELECT
        day, repo, file, classname, name,
        count() AS runs,
        countIf(outcome = 'passed') AS passed,
        countIf(outcome IN ('failed', 'error')) AS failed,
        countIf(outcome = 'skipped') AS skipped,
        countIf(outcome = 'passed' AND reruns > 0) AS rerun_passed,
        sum(toUInt64(round(duration * 1000000))) / 1000000 AS duration_sum,
        max(duration) AS duration_max
    FROM test_results FINAL
    WHERE day = {day:Date} AND repo = {repo:String}
    GROUP BY day, repo, file, classname, name
) AS totals
ANY LEFT JOIN
(
    SELECT file, classname, name, sum(p > 0 AND f > 0) AS flaky_shas
    FROM
    (
        SELECT file, classname, name, sha,
               countIf(outcome = 'passed') AS p,
               countIf(outcome IN ('failed', 'error')) AS f
        FROM
        (
            SELECT file, classname, name, delivery_id, outcome
            FROM test_results FINAL
            WHERE day = {day:Date} AND repo = {repo:String}
              AND (file, classname, name) IN
                  (SELECT file, classname, name FROM test_results
                   WHERE day = {day:Date} AND repo = {repo:String} AND outcome IN ('failed', 'error'))
        ) AS failing_tests
        ALL INNER JOIN
        (
            SELECT delivery_id, min(head_sha) AS sha
            FROM dispatches FINAL
            WHERE downstream_repo = {repo:String} AND head_sha != ''
              AND delivery_id IN (SELECT DISTINCT delivery_id FROM test_results
                                  WHERE day = {day:Date} AND repo = {repo:String})
            GROUP BY delivery_id
        ) AS shas USING delivery_id
        GROUP BY file, classname, name, sha
    ) AS per_sha
    GROUP BY file, classname, name
) AS flaky USING (file, classname, name)
