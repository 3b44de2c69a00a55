-- The HUD's queue-time snapshot (default.queue_times_historical, migration
-- 4): for each machine type, the longest wait of the jobs queued now (the
-- HUD calls it avg_queue_s) and how many are queued. The machine type is a
-- job's second runs-on label, or its only one (as the HUD's queued_jobs).
-- relay-stats runs it every stats.queue_snapshot_interval where migration 4
-- is applied. Rows are keyed by (machine_type, time): a repeat of the same
-- snapshot second is one row.
INSERT INTO default.queue_times_historical (time, avg_queue_s, machine_type, count)
SELECT
  toDateTime64(now(), 9, 'UTC') AS time,
  max(toInt64(now() - created_at)) AS avg_queue_s,
  if(length(labels) = 0, 'N/A', if(length(labels) > 1, labels[2], labels[1])) AS machine_type,
  toInt64(count()) AS count
FROM workflow_job FINAL
WHERE status = 'queued' AND created_at > now() - INTERVAL 1 DAY
GROUP BY machine_type;
