-- One downstream repo's trend per day over the last {days} days: pass rate (infra and test failures apart), time to signal and queue time.
-- param: repo String
-- param: days UInt32 14
--
-- Jobs classed as pass_rate classes them (excluded ones count in jobs
-- only), by the day they completed. signal: from the upstream webhook
-- reaching relay (or the dispatch, as time_to_signal measures it) to the
-- job's result, first attempts only; queue: dispatch to start, where known.
-- Days without a completed job have no row.
SELECT
    day,
    count() AS jobs,
    countIf(class = 'passed') AS passed,
    countIf(class = 'test_failure') AS test_failures,
    countIf(class = 'infra_failure') AS infra_failures,
    if(passed + test_failures + infra_failures = 0, 0,
       round(passed / (passed + test_failures + infra_failures), 4)) AS pass_rate,
    if(passed + test_failures + infra_failures = 0, 0,
       round(test_failures / (passed + test_failures + infra_failures), 4)) AS test_failure_rate,
    if(passed + test_failures + infra_failures = 0, 0,
       round(infra_failures / (passed + test_failures + infra_failures), 4)) AS infra_failure_rate,
    quantileExactIf(0.5)(signal_s, signal_s >= 0) AS p50_signal_s,
    -- over whole milliseconds, an integer sum: a float sum depends on the
    -- order it is added in (a cluster's shards, a server's threads)
    round(avgIf(toInt64(round(queue_s * 1000)), queue_s >= 0) / 1000, 3) AS mean_queue_s
FROM
(
    SELECT
        toDate(completed_at) AS day,
        {{job_class}} AS class,
        if(run_attempt IN ('', '1') AND dispatched_at > toDateTime(0),
           toInt64(completed_at) - toInt64(if(first_received_at > toDateTime(0), first_received_at, dispatched_at)),
           -1) AS signal_s,
        ifNull(queue_time, -1) AS queue_s
    FROM
    (
        SELECT delivery_id, completed_at, conclusion, failed_tests, timed_out_by_sweeper, run_attempt,
               dispatched_at, queue_time
        FROM crcr_workflow_job FINAL
        WHERE status = 'completed'
          AND completed_at >= toDateTime(today() - {days:UInt32})
          AND downstream_repo = {repo:String}
    ) AS jobs
    ANY LEFT JOIN
    (
        SELECT delivery_id, min(received_at) AS first_received_at
        FROM webhook_deliveries
        WHERE delivery_id IN (SELECT delivery_id FROM crcr_workflow_job
                              WHERE downstream_repo = {repo:String}
                                AND completed_at >= toDateTime(today() - {days:UInt32}))
        GROUP BY delivery_id
    ) AS deliveries USING delivery_id
)
GROUP BY day
ORDER BY day
