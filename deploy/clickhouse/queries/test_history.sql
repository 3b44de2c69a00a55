-- One test's history: its outcome in each job run across downstream repos and upstream commits over the last {days} days, newest first.
-- param: name String
-- param: classname String
-- param: days UInt32 30
-- param: limit UInt32 500
--
-- From test_results (passed rows included) joined to the job that
-- reported them. classname '' = any class. outcome: passed, failed, error
-- or skipped; reruns: attempts before the outcome.
SELECT
    uploaded_at,
    repo,
    upstream_repo,
    head_sha,
    file,
    classname,
    name,
    outcome,
    duration,
    reruns,
    job_id,
    job_name,
    run_url
FROM
(
    SELECT uploaded_at, repo, file, classname, name, outcome, duration, reruns, job_id, job_name
    FROM test_results FINAL
    PREWHERE name = {name:String}
    WHERE day >= today() - {days:UInt32}
      AND ({classname:String} = '' OR classname = {classname:String})
) AS runs
ANY LEFT JOIN
(
    SELECT id AS job_id, upstream_repo, head_sha, workflow_run_url AS run_url
    FROM crcr_workflow_job FINAL
    WHERE id IN (SELECT job_id FROM test_results PREWHERE name = {name:String}
                 WHERE day >= today() - {days:UInt32})
) AS jobs USING job_id
ORDER BY uploaded_at DESC, repo, file, classname, job_id
LIMIT {limit:UInt32}
