-- Pass rate per downstream repo and level over the last {days} days, infra failures kept apart from test failures.
-- param: days UInt32 14
-- param: repo String
--
-- Completed jobs of crcr_workflow_job (one row per job attempt), classed:
--   passed        conclusion success
--   test_failure  conclusion failure with at least one failed test
--   infra_failure conclusion failure without a failed test (the job broke
--                 before or around its tests), timed_out, startup_failure,
--                 or timed out by the relay's sweeper (never reported)
--   excluded      cancelled, skipped, neutral (nobody's signal)
-- pass_rate = passed / (passed + test_failure + infra_failure). repo: one
-- downstream repo, or '' for all. level: at each job's receipt.
SELECT
    downstream_repo,
    downstream_repo_level AS level,
    count() AS jobs,
    countIf(class = 'passed') AS passed,
    countIf(class = 'test_failure') AS test_failures,
    countIf(class = 'infra_failure') AS infra_failures,
    countIf(class = 'excluded') AS excluded,
    if(passed + test_failures + infra_failures = 0, 0,
       round(passed / (passed + test_failures + infra_failures), 4)) AS pass_rate,
    if(passed + test_failures + infra_failures = 0, 0,
       round(infra_failures / (passed + test_failures + infra_failures), 4)) AS infra_failure_rate,
    if(passed + test_failures + infra_failures = 0, 0,
       round(test_failures / (passed + test_failures + infra_failures), 4)) AS test_failure_rate
FROM
(
    SELECT
        downstream_repo,
        downstream_repo_level,
        {{job_class}} AS class
    FROM crcr_workflow_job FINAL
    WHERE status = 'completed'
      AND completed_at >= now() - {days:UInt32} * 86400
      AND ({repo:String} = '' OR downstream_repo = {repo:String})
)
GROUP BY downstream_repo, level
ORDER BY downstream_repo, level
