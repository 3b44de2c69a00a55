-- The commit grid's rows: a page of upstream commits relay dispatched, newest first, with their PRs, events and branches.
-- param: upstream_repo String
-- param: branch String
-- param: pr Int64 0
-- param: days UInt32 30
-- param: offset UInt32 0
-- param: limit UInt32 20
--
-- A commit is an (upstream_repo, head_sha) pair of relay's dispatches, or
-- of the dispatches it superseded (never sent: a newer head of the PR went
-- instead), ordered by its first dispatch (or supersession). branch: the pushed branch (push) or the
-- PR's head branch (pull_request), read from the upstream webhook relay
-- received ('' when that delivery is not in webhook_deliveries); the filter
-- matches any of the commit's branches. pr: one PR number, 0 = any. days:
-- commits first dispatched in the last {days} days (the deliveries read
-- for their branches: a day more).
-- commit_grid_cells gives the cells of these rows. Arrays are sorted:
-- groupUniqArray keeps the order rows arrive in (a cluster's shards, a
-- server's threads).
SELECT
    upstream_repo,
    head_sha,
    min(dispatched_at) AS first_dispatched_at,
    arraySort(arrayFilter(n -> n > 0, groupUniqArray(pr_number))) AS pr_numbers,
    arraySort(groupUniqArray(event)) AS events,
    arrayFilter(b -> b != '', arraySort(groupUniqArray(branch))) AS branches,
    uniqExact(downstream_repo) AS downstream_repos
FROM
(
    SELECT upstream_repo, head_sha, downstream_repo, dispatched_at, pr_number, event, delivery_id
    FROM dispatches FINAL
    WHERE head_sha != ''
      AND dispatched_at >= now() - {days:UInt32} * 86400
      AND ({upstream_repo:String} = '' OR upstream_repo = {upstream_repo:String})
    UNION ALL
    SELECT upstream_repo, head_sha, downstream_repo, superseded_at AS dispatched_at, pr_number,
           'pull_request' AS event, delivery_id
    FROM superseded_dispatches FINAL
    WHERE head_sha != ''
      AND superseded_at >= now() - {days:UInt32} * 86400
      AND ({upstream_repo:String} = '' OR upstream_repo = {upstream_repo:String})
) AS d
ANY LEFT JOIN
(
    SELECT delivery_id,
           replaceRegexpOne(min(visitParamExtractString(payload, 'ref')), '^refs/heads/', '') AS branch
    FROM webhook_deliveries
    WHERE event IN ('push', 'pull_request')
      AND received_at >= now() - ({days:UInt32} + 1) * 86400
      AND ({upstream_repo:String} = '' OR repo = {upstream_repo:String})
    GROUP BY delivery_id
) AS refs USING delivery_id
GROUP BY upstream_repo, head_sha
HAVING ({branch:String} = '' OR has(branches, {branch:String}))
   AND ({pr:Int64} = 0 OR has(pr_numbers, {pr:Int64}))
ORDER BY first_dispatched_at DESC, upstream_repo, head_sha
LIMIT {offset:UInt32}, {limit:UInt32}
