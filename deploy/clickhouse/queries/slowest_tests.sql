-- The slowest tests over the last {days} days, by mean duration, in seconds.
-- param: repo String
-- param: days UInt32 7
-- param: limit UInt32 50
--
-- From the test_daily rollup; repo '' = all downstream repos.
SELECT
    repo,
    file,
    classname,
    name,
    sum(runs) AS total_runs,
    round(sum(duration_sum) / sum(runs), 3) AS mean_s,
    max(duration_max) AS max_s
FROM test_daily FINAL
WHERE day >= today() - {days:UInt32}
  AND ({repo:String} = '' OR repo = {repo:String})
  AND runs > 0
GROUP BY repo, file, classname, name
ORDER BY mean_s DESC, repo, file, classname, name
LIMIT {limit:UInt32}
