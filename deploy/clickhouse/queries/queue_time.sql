-- Queue time (dispatch to the job starting) per downstream repo over the last {days} days, in seconds.
-- param: days UInt32 14
-- param: repo String
--
-- Jobs whose queue time is known (the collector leaves it NULL for re-run
-- attempts and self-reports).
-- The mean is taken over whole milliseconds (an integer sum): a sum of floats depends on
-- the order it is added in, which differs between a cluster's shards and one server's threads.
SELECT
    downstream_repo,
    count() AS jobs,
    round(avg(toInt64(round(queue_time * 1000))) / 1000, 3) AS mean_s,
    quantileExact(0.5)(queue_time) AS p50_s,
    quantileExact(0.9)(queue_time) AS p90_s,
    max(queue_time) AS max_s
FROM crcr_workflow_job FINAL
WHERE isNotNull(queue_time)
  AND started_at >= now() - {days:UInt32} * 86400
  AND ({repo:String} = '' OR downstream_repo = {repo:String})
GROUP BY downstream_repo
ORDER BY downstream_repo
