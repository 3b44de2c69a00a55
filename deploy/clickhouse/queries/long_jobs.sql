-- Jobs over 3 hours end to end (dispatch to completion) per downstream repo over the last {days} days.
-- param: days UInt32 14
-- param: repo String
-- param: limit_s UInt32 10800
--
-- End to end: completed_at - dispatched_at; for jobs without a dispatch
-- time (re-run attempts, self-reports), queue + execution time. Cancelled
-- and skipped jobs are left out.
SELECT
    downstream_repo,
    count() AS jobs,
    countIf(e2e_s > {limit_s:UInt32}) AS over_limit,
    round(over_limit / jobs, 4) AS over_limit_share,
    quantileExact(0.5)(e2e_s) AS p50_e2e_s
FROM
(
    SELECT
        downstream_repo,
        {{job_e2e_seconds}} AS e2e_s
    FROM crcr_workflow_job FINAL
    WHERE status = 'completed'
      AND completed_at >= now() - {days:UInt32} * 86400
      AND conclusion NOT IN ('cancelled', 'skipped')
      AND ({repo:String} = '' OR downstream_repo = {repo:String})
)
GROUP BY downstream_repo
ORDER BY downstream_repo
