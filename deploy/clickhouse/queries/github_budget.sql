-- GitHub API budget use per hour over the last {hours} hours: writes dispatch made, by kind and result, attempts, limit answers and latency.
-- param: hours UInt32 24
--
-- From github_outcomes (one row per write request, retries included in
-- attempts). limited: requests whose last answer was 403 or 429 (primary
-- or secondary rate limit, or refused); repeated: sent again after a crash.
SELECT
    toStartOfHour(finished_at) AS hour,
    kind,
    result,
    count() AS requests,
    sum(attempts) AS attempts,
    countIf(http_status IN (403, 429)) AS limited,
    countIf(repeated = 1) AS repeated,
    quantileExact(0.5)(latency_ms) AS p50_latency_ms,
    max(latency_ms) AS max_latency_ms
FROM github_outcomes FINAL
WHERE finished_at >= now() - {hours:UInt32} * 3600
GROUP BY hour, kind, result
ORDER BY hour, kind, result
