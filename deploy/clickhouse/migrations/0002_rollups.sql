-- Migration 2: rollups, so dashboards never scan the raw per-test table.
--
-- No incremental counters (a SummingMergeTree view over raw inserts would
-- count a replayed record twice). Instead stats recomputes whole windows
-- (one day of one repo) deterministically from the raw rows, deduplicated,
-- into replacing tables: a replay recomputes the same numbers.
--
-- Which windows: each ingested batch marks the (day, repo) windows it
-- touched in rollup_marks after its raw insert and before its offsets are
-- committed; the refresher recomputes every window marked at or after its
-- last computation began (rollup_state), so nothing acknowledged is left
-- out of a rollup, even across a crash.
CREATE TABLE IF NOT EXISTS rollup_marks (
  kind String,
  day Date,
  repo String,
  marked_at_ms UInt64
) ENGINE = ReplacingMergeTree(marked_at_ms)
PARTITION BY toYYYYMM(day)
ORDER BY (kind, day, repo);

CREATE TABLE IF NOT EXISTS rollup_state (
  kind String,
  day Date,
  repo String,
  computed_from_ms UInt64
) ENGINE = ReplacingMergeTree(computed_from_ms)
PARTITION BY toYYYYMM(day)
ORDER BY (kind, day, repo);

-- One row per test, repo and day. flaky_shas: upstream commits on which the
-- test both passed and failed that day; rerun_passed: runs that passed only
-- on a rerun. durations in seconds.
CREATE TABLE IF NOT EXISTS test_daily (
  day Date,
  repo String,
  file String,
  classname String,
  name String,
  runs UInt64,
  passed UInt64,
  failed UInt64,
  skipped UInt64,
  rerun_passed UInt64,
  flaky_shas UInt64,
  duration_sum Float64,
  duration_max Float64,
  computed_at_ms UInt64
) ENGINE = ReplacingMergeTree(computed_at_ms)
PARTITION BY toYYYYMM(day)
ORDER BY (repo, day, file, classname, name);

-- One row per test file, repo and day (test sharding reads this). uploads:
-- reports (job runs) the file appeared in, so duration_sum / uploads is
-- the file's time per job.
CREATE TABLE IF NOT EXISTS test_file_daily (
  day Date,
  repo String,
  file String,
  tests UInt64,
  uploads UInt64,
  runs UInt64,
  failed UInt64,
  skipped UInt64,
  duration_sum Float64,
  computed_at_ms UInt64
) ENGINE = ReplacingMergeTree(computed_at_ms)
PARTITION BY toYYYYMM(day)
ORDER BY (repo, day, file);
