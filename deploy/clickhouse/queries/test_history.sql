-- One test's history: its outcome in each job run across downstream repositories and upstream commits over the last {days} days, newest first.
-- param: name String
-- param: classname String
-- param: file String
-- param: days UInt32 30
-- param: limit UInt32 500
--
-- From test_results (passed rows included) joined to the job that reported
-- them. file, classname and name are matched exactly: with the repos (the
-- key's first column) and the days they pick a few granules of the table's
-- key (repo, day, file, classname, name), where a name alone would scan
-- every row (test_files finds a name's files and classes). Each test case
-- once (LIMIT 1 BY its upload, batch and index: a replayed row is the same
-- row), without FINAL. outcome: passed, failed, error or skipped; reruns:
-- attempts before the outcome. Ordered down to the case (a name can
-- appear more than once in one job), so the rows a LIMIT keeps are fixed.
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
    SELECT uploaded_at, repo, file, classname, name, outcome, duration, reruns, job_id, job_name, upload_id, seq, idx
    FROM test_results
    WHERE repo IN (SELECT DISTINCT downstream_repo FROM crcr_workflow_job)
      AND day >= today() - {days:UInt32}
      AND file = {file:String}
      AND classname = {classname:String}
      AND name = {name:String}
    ORDER BY uploaded_at DESC, upload_id, seq, idx, version DESC
    LIMIT 1 BY upload_id, seq, idx
) AS runs
ANY LEFT JOIN
(
    SELECT id AS job_id, upstream_repo, head_sha, workflow_run_url AS run_url
    FROM crcr_workflow_job FINAL
    PREWHERE id IN (SELECT job_id FROM test_results
                    WHERE repo IN (SELECT DISTINCT downstream_repo FROM crcr_workflow_job)
                      AND day >= today() - {days:UInt32}
                      AND file = {file:String}
                      AND classname = {classname:String}
                      AND name = {name:String})
) AS jobs USING job_id
ORDER BY uploaded_at DESC, repo, file, classname, job_id, upload_id, seq, idx
LIMIT {limit:UInt32}
