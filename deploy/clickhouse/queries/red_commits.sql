-- Red-commit rate upstream per day over the last {days} days: upstream commits with downstream results, and how many had a failing downstream job.
-- param: days UInt32 14
-- param: upstream_repo String
-- param: min_level UInt8 2
--
-- A commit is red when any completed job of a downstream repo at level
-- min_level or above failed (tests or infra, as pass_rate classes them);
-- cancelled and skipped jobs do not count. upstream_repo '' = all.
SELECT
    upstream_repo,
    day,
    count() AS commits,
    countIf(failed_jobs > 0) AS red_commits,
    round(red_commits / commits, 4) AS red_rate
FROM
(
    SELECT
        upstream_repo,
        head_sha,
        toDate(min(completed_at)) AS day,
        countIf(class IN ('test_failure', 'infra_failure')) AS failed_jobs
    FROM
    (
        SELECT upstream_repo, head_sha, completed_at,
               {{job_class}} AS class
        FROM crcr_workflow_job FINAL
        WHERE status = 'completed'
          AND completed_at >= now() - {days:UInt32} * 86400
          AND downstream_repo_level >= {min_level:UInt8}
          AND head_sha != ''
          AND ({upstream_repo:String} = '' OR upstream_repo = {upstream_repo:String})
    ) AS jobs
    WHERE class != 'excluded'
    GROUP BY upstream_repo, head_sha
)
GROUP BY upstream_repo, day
ORDER BY upstream_repo, day
