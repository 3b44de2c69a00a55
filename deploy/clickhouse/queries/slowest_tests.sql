-- The slowest tests over the last {days} days, by mean duration over runs not skipped, in seconds.
-- param: repo String
-- param: days UInt32 7
-- param: limit UInt32 50
--
-- From the test_slowest_daily snapshots: each day's 1,000 slowest tests
-- per repo (its latest computation), so over several days a test is
-- ranked by its days among those. repo '' = all downstream repos.
-- FINAL: a computation's rows landed twice (a retried statement, two
-- instances in the same millisecond) count once.
-- duration_sum is summed as whole microseconds (integers): a sum of floats depends on the
-- order it is added in, which differs between a cluster's shards and one server's threads.
SELECT
    repo,
    file,
    classname,
    name,
    sum(runs) AS timed_runs,
    round(sum(toUInt64(round(duration_sum * 1000000))) / 1000000 / sum(runs), 3) AS mean_s,
    max(duration_max) AS max_s
FROM test_slowest_daily FINAL
WHERE day >= today() - {days:UInt32}
  AND ({repo:String} = '' OR repo = {repo:String})
  AND (repo, day, computed_at_ms) IN
      (SELECT repo, day, max(computed_at_ms) FROM test_slowest_daily
       WHERE day >= today() - {days:UInt32} AND ({repo:String} = '' OR repo = {repo:String})
       GROUP BY repo, day)
GROUP BY repo, file, classname, name
ORDER BY mean_s DESC, repo, file, classname, name
LIMIT {limit:UInt32}
