-- The commit grid's cells: for the given upstream commits, each downstream repo dispatched to, at its level, and its jobs' results.
-- param: upstream_repo String
-- param: shas String
--
-- shas: head SHAs, comma-separated (the ones commit_grid returned). One row
-- per job attempt of crcr_workflow_job; a repo dispatched to that has no job
-- yet: one row with job_id ''. level: the highest the repo had at this
-- commit's dispatches. superseded_by: for a repo this commit was never sent
-- to because a newer head of its PR went instead (coalescing), the request
-- sent instead, and no job; '' for a repo it was dispatched to. duration_s: started to completed (0 until both are
-- known). PREWHERE on head_sha before FINAL reads only these commits' rows
-- (5x faster over 350,000 jobs); it is sound because every version of a
-- row has the same head_sha.
SELECT
    upstream_repo,
    head_sha,
    downstream_repo,
    level,
    job_id,
    workflow_name,
    job_name,
    run_attempt,
    status,
    conclusion,
    timed_out_by_sweeper,
    run_url,
    duration_s,
    failed_tests,
    superseded_by
FROM
(
    -- A repo both dispatched to and superseded at this commit (one event
    -- sent, a later one superseded) is a dispatched cell; one superseded
    -- more than once names the latest request sent instead.
    SELECT upstream_repo, head_sha, downstream_repo, max(level) AS level,
           if(max(sent) = 1, '', argMax(by, (at, by))) AS superseded_by
    FROM
    (
        SELECT upstream_repo, head_sha, downstream_repo, level, 1 AS sent, '' AS by, toInt64(0) AS at
        FROM dispatches FINAL
        PREWHERE head_sha IN (SELECT arrayJoin(splitByChar(',', {shas:String})))
        WHERE {upstream_repo:String} = '' OR upstream_repo = {upstream_repo:String}
        UNION ALL
        SELECT upstream_repo, head_sha, downstream_repo, level, 0 AS sent, superseded_by AS by, superseded_at_ms AS at
        FROM superseded_dispatches FINAL
        PREWHERE head_sha IN (SELECT arrayJoin(splitByChar(',', {shas:String})))
        WHERE {upstream_repo:String} = '' OR upstream_repo = {upstream_repo:String}
    )
    GROUP BY upstream_repo, head_sha, downstream_repo
) AS targets
ALL LEFT JOIN
(
    SELECT
        upstream_repo,
        head_sha,
        downstream_repo,
        id AS job_id,
        workflow_name,
        job_name,
        run_attempt,
        status,
        conclusion,
        timed_out_by_sweeper,
        workflow_run_url AS run_url,
        if(started_at > toDateTime(0) AND completed_at >= started_at,
           toInt64(completed_at) - toInt64(started_at), 0) AS duration_s,
        failed_tests
    FROM crcr_workflow_job FINAL
    PREWHERE head_sha IN (SELECT arrayJoin(splitByChar(',', {shas:String})))
    WHERE {upstream_repo:String} = '' OR upstream_repo = {upstream_repo:String}
) AS jobs USING (upstream_repo, head_sha, downstream_repo)
ORDER BY head_sha, upstream_repo, level DESC, downstream_repo, job_name, run_attempt, job_id
