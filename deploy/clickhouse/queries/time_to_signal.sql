-- Time to signal per downstream repo over the last {days} days: from the upstream webhook reaching the relay to the downstream job's result, in seconds.
-- param: days UInt32 14
-- param: repo String
--
-- Start: when intake received the upstream delivery (webhook_deliveries);
-- when that row is missing (the delivery reached another relay, or was
-- never recorded), the dispatch time. First attempts only (a re-run keeps
-- its delivery id and would be measured from the original webhook).
SELECT
    downstream_repo,
    count() AS jobs,
    quantileExact(0.5)(signal_s) AS p50_s,
    quantileExact(0.9)(signal_s) AS p90_s,
    max(signal_s) AS max_s
FROM
(
    SELECT
        downstream_repo,
        toInt64(completed_at) - toInt64(if(first_received_at > toDateTime(0), first_received_at, dispatched_at)) AS signal_s
    FROM
    (
        SELECT downstream_repo, delivery_id, dispatched_at, completed_at
        FROM crcr_workflow_job FINAL
        WHERE status = 'completed'
          AND completed_at >= now() - {days:UInt32} * 86400
          AND dispatched_at > toDateTime(0)
          AND run_attempt IN ('', '1')
          AND ({repo:String} = '' OR downstream_repo = {repo:String})
    ) AS jobs
    ANY LEFT JOIN
    (
        SELECT delivery_id, min(received_at) AS first_received_at
        FROM webhook_deliveries
        WHERE delivery_id IN (SELECT delivery_id FROM crcr_workflow_job
                              WHERE completed_at >= now() - {days:UInt32} * 86400)
        GROUP BY delivery_id
    ) AS deliveries USING delivery_id
)
GROUP BY downstream_repo
ORDER BY downstream_repo
