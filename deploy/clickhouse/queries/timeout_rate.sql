-- Timeout rate per downstream repo over the last {days} days: jobs that timed out (reported timed_out, or completed by the relay's sweeper after going silent).
-- param: days UInt32 14
-- param: repo String
SELECT
    downstream_repo,
    count() AS jobs,
    countIf(conclusion = 'timed_out' AND timed_out_by_sweeper = 0) AS reported_timeouts,
    countIf(timed_out_by_sweeper = 1) AS swept,
    round((reported_timeouts + swept) / jobs, 4) AS timeout_rate
FROM crcr_workflow_job FINAL
WHERE status = 'completed'
  AND completed_at >= now() - {days:UInt32} * 86400
  AND conclusion NOT IN ('cancelled', 'skipped')
  AND ({repo:String} = '' OR downstream_repo = {repo:String})
GROUP BY downstream_repo
ORDER BY downstream_repo
