-- The issues webhooks of the upstream repositories that may be about a DISABLED test, received in the last {days} days, oldest first: the raw payloads disabled-tests-condensed.json is made from.
-- param: days UInt32 365
-- param: repos String pytorch/pytorch
--
-- PyTorch disables a test by filing an issue titled "DISABLED <test>
-- (__main__.<class>)", with an optional "Platforms: linux, mac" line in its
-- body, and enables it again by closing the issue. relay-stats reads each
-- issue's latest delivery (issue state, title, body and the author's
-- author_association) from these payloads and decides there; the text
-- match only narrows the rows. repos: the upstream repositories
-- (stats.ci_files_upstreams), lower-case, comma-separated; '' reads none.
-- days (stats.ci_disabled_days) bounds what is read: an issue whose
-- latest delivery is older no longer disables its test.
SELECT
    repo,
    received_at_ms,
    payload
FROM webhook_deliveries FINAL
WHERE event = 'issues'
  AND received_at >= now() - {days:UInt32} * 86400
  AND has(splitByChar(',', {repos:String}), lower(repo))
  AND position(payload, 'DISABLED ') > 0
ORDER BY received_at_ms, delivery_id
