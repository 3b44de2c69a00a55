-- Tests whose passing runs took more than {threshold} seconds on average over the last {days} days (slow-tests.json).
-- param: days UInt32 7
-- param: threshold Float64 60
--
-- Keyed as PyTorch's CI matches tests: "<name> (__main__.<class>)", the
-- class being the JUnit classname's last dotted part. A test's time is its
-- passing cases' durations summed per job run (parametrised repeats and
-- reruns in one job add up), averaged over the runs.
-- Sums are taken over whole microseconds (integers): a sum of floats depends on the order
-- it is added in, which differs between a cluster's shards and one server's threads.
SELECT
    concat(test_name, ' (__main__.', test_class, ')') AS test,
    round(avg(total_us) / 1000000, 3) AS seconds,
    count() AS runs
FROM
(
    SELECT
        job_id,
        name AS test_name,
        replaceRegexpOne(classname, '^.*\\.', '') AS test_class,
        sum(toUInt64(round(duration * 1000000))) AS total_us
    FROM test_results FINAL
    WHERE day >= today() - {days:UInt32} AND outcome = 'passed' AND name != ''
    GROUP BY job_id, test_name, test_class
)
GROUP BY test
HAVING seconds > {threshold:Float64}
ORDER BY test
