-- Migration 3: small per-window snapshots for the two dashboards that would
-- otherwise scan test_daily whole (a repo's day is a million tests).
--
-- Each computation of a window (one day of one downstream repo) writes its
-- rows with computed_at_ms = when it began; queries read only the rows of
-- each window's latest computation (the IN on max(computed_at_ms)), so a
-- row an older computation wrote and a newer one did not (a test that left
-- the top list) is ignored, and a replay (a recomputation from the same raw
-- rows) gives the same rows again.

-- Tests that were flaky that day: failed and passed on one upstream sha,
-- or passed only on a rerun. Usually a few hundred rows a window.
CREATE TABLE IF NOT EXISTS test_flaky_daily (
  day Date,
  repo String,
  file String,
  classname String,
  name String,
  runs UInt64,
  failed UInt64,
  rerun_passed UInt64,
  flaky_shas UInt64,
  computed_at_ms UInt64
) ENGINE = ReplacingMergeTree(computed_at_ms)
PARTITION BY toYYYYMM(day)
ORDER BY (repo, day, computed_at_ms, file, classname, name);

-- The day's 1,000 slowest tests of the repo by mean duration (skipped runs
-- left out). Multi-day "slowest" lists are chosen among these.
CREATE TABLE IF NOT EXISTS test_slowest_daily (
  day Date,
  repo String,
  file String,
  classname String,
  name String,
  runs UInt64,
  duration_sum Float64,
  duration_max Float64,
  computed_at_ms UInt64
) ENGINE = ReplacingMergeTree(computed_at_ms)
PARTITION BY toYYYYMM(day)
ORDER BY (repo, day, computed_at_ms, file, classname, name);
