-- Test file durations per downstream repo over the last {days} days, for sharding: time per job run of each file, in seconds.
-- param: repo String
-- param: days UInt32 7
-- param: file String
--
-- From the test_file_daily rollup. per_run_s: the file's total test time
-- divided by the reports (job runs) it appeared in. repo '' = all,
-- file '' = every file.
-- duration_sum is summed as whole microseconds (integers): a sum of floats depends on the
-- order it is added in, which differs between a cluster's shards and one server's threads.
SELECT
    repo,
    file,
    max(tests) AS tests,
    sum(uploads) AS job_runs,
    round(sum(toUInt64(round(duration_sum * 1000000))) / 1000000 / sum(uploads), 3) AS per_run_s,
    sum(failed) AS failed,
    sum(skipped) AS skipped
FROM test_file_daily FINAL
WHERE day >= today() - {days:UInt32}
  AND ({repo:String} = '' OR repo = {repo:String})
  AND ({file:String} = '' OR file = {file:String})
GROUP BY repo, file
ORDER BY repo, per_run_s DESC, file
