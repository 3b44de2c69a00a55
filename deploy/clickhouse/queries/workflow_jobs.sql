-- Upstream workflow jobs (from workflow_job webhooks) per repository and workflow over the last {days} days: counts by conclusion and queue time in seconds.
-- param: days UInt32 7
-- param: repo String
SELECT
    repository_full_name,
    workflow_name,
    count() AS jobs,
    countIf(status = 'completed' AND conclusion = 'success') AS succeeded,
    countIf(status = 'completed' AND conclusion = 'failure') AS failed,
    countIf(status != 'completed') AS unfinished,
    avgIf(toInt64(started_at) - toInt64(created_at), started_at >= created_at AND started_at > toDateTime(0)) AS mean_queue_s
FROM workflow_job FINAL
WHERE created_at >= now() - {days:UInt32} * 86400
  AND ({repo:String} = '' OR repository_full_name = {repo:String})
GROUP BY repository_full_name, workflow_name
ORDER BY repository_full_name, workflow_name
