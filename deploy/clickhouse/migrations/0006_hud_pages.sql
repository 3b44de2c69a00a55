-- relay's ClickHouse schema, migration 6: the rest of what the PyTorch
-- HUD's pages read (pytorch/test-infra torchci/clickhouse_queries, all 192
-- vendored in tests/hud/clickhouse_queries), under the HUD's names, as
-- migration 4 did for its first 11 queries. tools/clickhouse/check-hud
-- runs all 192 on chDB over relay's migrations and says, for each query
-- that does not run, why (docs/hud-compatibility.md).
--
-- requires: ClickHouse >= 23.3
-- (as migration 4: views with named tuples and DateTime64; the HUD's
-- queries need query parameters and the current analyzer.)

-- The HUD's lookup view of jobs by start time (ttrs_percentiles), over
-- migration 4's default.workflow_job.
CREATE OR REPLACE VIEW materialized_views.workflow_job_by_started_at AS SELECT id, started_at FROM default.workflow_job;
