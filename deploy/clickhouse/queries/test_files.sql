-- The files and classes a test name was reported in over the last {days} days, for the HUD's test page to pick from.
-- param: name String
-- param: classname String
-- param: file String
-- param: days UInt32 30
--
-- From the test_daily rollup (one row per test, repo and day; no FINAL:
-- a superseded row names the same file and class). classname, file: ''
-- = any. At most 50, the most widespread first.
SELECT file, classname, uniqExact(repo) AS repos
FROM test_daily
WHERE day >= today() - {days:UInt32}
  AND name = {name:String}
  AND ({classname:String} = '' OR classname = {classname:String})
  AND ({file:String} = '' OR file = {file:String})
GROUP BY file, classname
ORDER BY repos DESC, file, classname
LIMIT 50
