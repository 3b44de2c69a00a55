-- A completed job's end-to-end seconds: from relay's dispatch to its
-- completion, or queue plus execution time for a job relay did not
-- dispatch. Over crcr_workflow_job's columns; written {{job_e2e_seconds}}
-- (see job_class.sql for where it is substituted).
if(dispatched_at > toDateTime(0) AND completed_at >= dispatched_at,
   toInt64(completed_at) - toInt64(dispatched_at),
   toInt64(ifNull(queue_time, 0) + ifNull(execution_time, 0)))
