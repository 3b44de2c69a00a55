-- Mean time per test class per file and job configuration over the last {days} days, for sharding (test-class-times.json).
-- param: days UInt32 7
--
-- As ci_test_times, one level deeper: the class is the JUnit classname's
-- last dotted part (test_nn.TestNN -> TestNN); its time is its cases'
-- durations summed per job run, averaged over the runs.
-- Sums are taken over whole microseconds (integers): a sum of floats depends on the order
-- it is added in, which differs between a cluster's shards and one server's threads.
SELECT
    env,
    config,
    test_file,
    test_class,
    round(avg(total_us) / 1000000, 3) AS seconds,
    count() AS runs
FROM
(
    SELECT
        job_id,
        if(extract(job_name, '^(.*) /') = '', job_name, extract(job_name, '^(.*) /')) AS env,
        if(extract(job_name, '/ test \\(([A-Za-z0-9_-]*),') = '', 'default', extract(job_name, '/ test \\(([A-Za-z0-9_-]*),')) AS config,
        replaceRegexpOne(replaceRegexpOne(file, '^test/', ''), '\\.py$', '') AS test_file,
        replaceRegexpOne(classname, '^.*\\.', '') AS test_class,
        sum(toUInt64(round(duration * 1000000))) AS total_us
    FROM test_results FINAL
    WHERE day >= today() - {days:UInt32} AND file != '' AND classname != ''
    GROUP BY job_id, env, config, test_file, test_class
)
GROUP BY env, config, test_file, test_class
ORDER BY env, config, test_file, test_class
