-- Tier health: per downstream repo, its figures over the last {days} days and which CRCR L3 rules hold.
-- param: days UInt32 14
--
-- The L3 rules: at least 30 days at L2 or above; p50 end to end (dispatch
-- to completion) under 3 h; under 1% of jobs over 3 h end to end; mean
-- queue time under 30 min; timeout rate under 1%; pass rate at least 90%.
-- Promotion to L3 is judged over 14 days, demotion from L3 over 7
-- (`relay-stats tier-report` runs both and gives the verdicts). A window
-- without completed jobs holds no evidence: its job rules fail. Jobs are
-- classed as pass_rate classes them; the excluded ones (cancelled, skipped,
-- neutral: nobody's signal) are left out; a job timed out by the relay's
-- sweeper counts as a timeout. level: at the repo's latest
-- dispatch; days_at_l2 in whole days.
SELECT
    repo,
    current_level AS level,
    days_at_l2,
    jobs,
    p50_e2e_s,
    over_3h_share,
    mean_queue_s,
    timeout_rate,
    pass_rate,
    days_at_l2 >= 30 AS ok_time_at_l2,
    jobs > 0 AND p50_e2e_s < 10800 AS ok_p50_e2e,
    jobs > 0 AND over_3h_share < 0.01 AS ok_over_3h,
    jobs > 0 AND mean_queue_s < 1800 AS ok_queue,
    jobs > 0 AND timeout_rate < 0.01 AS ok_timeouts,
    jobs > 0 AND pass_rate >= 0.9 AS ok_pass_rate
FROM
(
    SELECT
        downstream_repo AS repo,
        argMax(level, dispatched_at_ms) AS current_level,
        if(countIf(level >= 2 AND dispatched_at > last_below) = 0, 0,
           intDiv(toInt64(now()) - toInt64(minIf(dispatched_at, level >= 2 AND dispatched_at > last_below)), 86400)) AS days_at_l2
    FROM dispatches FINAL
    ANY LEFT JOIN
    (
        SELECT downstream_repo, maxIf(dispatched_at, level < 2) AS last_below
        FROM dispatches FINAL
        GROUP BY downstream_repo
    ) AS below USING downstream_repo
    GROUP BY downstream_repo
) AS levels
ANY LEFT JOIN
(
    SELECT
        downstream_repo AS repo,
        count() AS jobs,
        quantileExact(0.5)(e2e) AS p50_e2e_s,
        countIf(e2e > 10800) / count() AS over_3h_share,
        -- over whole milliseconds, an integer sum: a float sum depends on
        -- the order it is added in (a cluster's shards, a server's threads)
        avgIf(toInt64(round(queue_time * 1000)), isNotNull(queue_time)) / 1000 AS mean_queue_s,
        countIf(conclusion = 'timed_out' OR timed_out_by_sweeper = 1) / count() AS timeout_rate,
        countIf(class = 'passed') / count() AS pass_rate
    FROM
    (
        SELECT
            downstream_repo,
            conclusion,
            timed_out_by_sweeper,
            queue_time,
            -- as pass_rate classes jobs
            {{job_class}} AS class,
            {{job_e2e_seconds}} AS e2e
        FROM crcr_workflow_job FINAL
        WHERE status = 'completed'
          AND completed_at >= now() - {days:UInt32} * 86400
    )
    WHERE class != 'excluded'
    GROUP BY downstream_repo
) AS jobs_window USING repo
ORDER BY repo
