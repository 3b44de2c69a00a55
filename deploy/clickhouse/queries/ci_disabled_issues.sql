-- Every issues webhook that may be about a DISABLED test, oldest first: the raw payloads disabled-tests-condensed.json is made from.
--
-- PyTorch disables a test by filing an issue titled "DISABLED <test>
-- (__main__.<class>)", with an optional "Platforms: linux, mac" line in its
-- body, and enables it again by closing the issue. relay-stats reads each
-- issue's latest delivery (issue state, title and body) from these
-- payloads; the text match only narrows the rows.
SELECT
    repo,
    received_at_ms,
    payload
FROM webhook_deliveries FINAL
WHERE event = 'issues' AND position(payload, 'DISABLED ') > 0
ORDER BY received_at_ms, delivery_id
