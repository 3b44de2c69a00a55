-- Removes superseded computations of the slowest-test snapshots (as prune_test_flaky_daily.sql): every row of a window whose computation is not the window's latest, which is all slowest_tests.sql reads.
ALTER TABLE test_slowest_daily DELETE
WHERE (repo, day, computed_at_ms) NOT IN (SELECT repo, day, max(computed_at_ms) FROM test_slowest_daily GROUP BY repo, day)
