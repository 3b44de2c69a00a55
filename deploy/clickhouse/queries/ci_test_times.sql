-- Mean time per test file per job configuration over the last {days} days, for sharding (test-times.json).
-- param: days UInt32 7
--
-- A job's configuration as PyTorch's CI names it: the build environment is
-- the job name before its last " /" (the whole name when it has none), the
-- test config the first word of "/ test (<config>, <shard>, <shards>,
-- <runner>)", "default" when the name has none. The file key is the test
-- file without a leading "test/" and without ".py" (test/distributed/
-- test_c10d.py -> distributed/test_c10d). A file's time is its cases'
-- durations summed per job run (one shard's share), averaged over the runs.
-- Sums are taken over whole microseconds (integers): a sum of floats depends on the order
-- it is added in, which differs between a cluster's shards and one server's threads.
SELECT
    env,
    config,
    test_file,
    round(avg(total_us) / 1000000, 3) AS seconds,
    count() AS runs
FROM
(
    SELECT
        job_id,
        if(extract(job_name, '^(.*) /') = '', job_name, extract(job_name, '^(.*) /')) AS env,
        if(extract(job_name, '/ test \\(([A-Za-z0-9_-]*),') = '', 'default', extract(job_name, '/ test \\(([A-Za-z0-9_-]*),')) AS config,
        replaceRegexpOne(replaceRegexpOne(file, '^test/', ''), '\\.py$', '') AS test_file,
        sum(toUInt64(round(duration * 1000000))) AS total_us
    FROM test_results FINAL
    WHERE day >= today() - {days:UInt32} AND file != ''
    GROUP BY job_id, env, config, test_file
)
GROUP BY env, config, test_file
ORDER BY env, config, test_file
