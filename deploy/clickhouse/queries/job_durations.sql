-- Execution time per downstream repo, workflow and job over the last {days} days, in seconds.
-- param: days UInt32 14
-- param: repo String
-- The mean is taken over whole milliseconds (an integer sum): a sum of floats depends on
-- the order it is added in, which differs between a cluster's shards and one server's threads.
SELECT
    downstream_repo,
    workflow_name,
    job_name,
    count() AS jobs,
    round(avg(toInt64(round(execution_time * 1000))) / 1000, 3) AS mean_s,
    quantileExact(0.5)(execution_time) AS p50_s,
    quantileExact(0.9)(execution_time) AS p90_s,
    max(execution_time) AS max_s
FROM crcr_workflow_job FINAL
WHERE status = 'completed'
  AND isNotNull(execution_time)
  AND completed_at >= now() - {days:UInt32} * 86400
  AND ({repo:String} = '' OR downstream_repo = {repo:String})
GROUP BY downstream_repo, workflow_name, job_name
ORDER BY downstream_repo, workflow_name, job_name
