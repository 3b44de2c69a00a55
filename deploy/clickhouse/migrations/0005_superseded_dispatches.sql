-- relay's ClickHouse schema, migration 5: the dispatches dispatch never sent
-- because a newer head of the same pull request was queued for the same
-- downstream repository first (coalescing, docs/architecture.md). They have
-- no relay.dispatches record (nothing was sent), so without this table the
-- HUD's commit grid could not show that a commit's signal was skipped on
-- purpose rather than lost.
--
-- Filled by relay-stats from github.outcomes: one row per outcome whose
-- result is `superseded` and that names its upstream commit (outcomes
-- written by dispatch before this migration do not: they stay out).
CREATE TABLE IF NOT EXISTS superseded_dispatches (
  request_id String,
  delivery_id String,
  upstream_repo String,
  downstream_repo String,
  level UInt8,
  pr_number Int64,
  head_sha String,
  superseded_by String,
  superseded_at DateTime,
  superseded_at_ms Int64,
  version UInt64
) ENGINE = ReplacingMergeTree(version)
PARTITION BY toYYYYMM(superseded_at)
ORDER BY request_id;
