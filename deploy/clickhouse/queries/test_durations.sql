-- Per-test durations of one downstream repo over the last {days} days (optionally one file), for sharding, in seconds.
-- param: repo String
-- param: file String
-- param: days UInt32 7
-- param: limit UInt32 1000
--
-- From the test_daily rollup; file '' = every file. Means over runs not skipped.
-- duration_sum is summed as whole microseconds (integers): a sum of floats depends on the
-- order it is added in, which differs between a cluster's shards and one server's threads.
SELECT
    file,
    classname,
    name,
    sum(runs - skipped) AS timed_runs,
    round(sum(toUInt64(round(duration_sum * 1000000))) / 1000000 / greatest(sum(runs - skipped), 1), 3) AS mean_s,
    max(duration_max) AS max_s
FROM test_daily FINAL
WHERE repo = {repo:String}
  AND day >= today() - {days:UInt32}
  AND ({file:String} = '' OR file = {file:String})
GROUP BY file, classname, name
ORDER BY file, mean_s DESC, classname, name
LIMIT {limit:UInt32}
