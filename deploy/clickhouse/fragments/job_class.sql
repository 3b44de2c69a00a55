-- How relay classes a completed CRCR job, for pass rates and red commits:
-- 'passed', 'test_failure' (failed with failing tests), 'infra_failure'
-- (timed out, swept by the collector, or failed without a failing test),
-- 'excluded' (cancelled, skipped, neutral...). Over crcr_workflow_job's
-- columns; written {{job_class}} in deploy/clickhouse/queries and
-- substituted where the SQL is embedded (services/stats/EmbedSql.cmake,
-- tools/clickhouse/sql_fragments.py).
multiIf(timed_out_by_sweeper = 1, 'infra_failure',
        conclusion = 'success', 'passed',
        conclusion = 'failure' AND failed_tests > 0, 'test_failure',
        conclusion IN ('failure', 'timed_out', 'startup_failure'), 'infra_failure',
        'excluded')
