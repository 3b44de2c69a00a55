-- Cluster cost per team and node group over the last {days} days: cluster-seconds and node-seconds from relay-lifecycle's usage events.
-- param: days UInt32 30
-- (sums in integer milliseconds: the result does not depend on row order)
-- param: team String
SELECT
    team,
    node_group,
    uniqExact(cluster_id) AS clusters,
    sum(toUInt64(round(cluster_seconds * 1000))) / 1000 AS total_cluster_seconds,
    sum(toUInt64(round(node_seconds * 1000))) / 1000 AS total_node_seconds
FROM cluster_events FINAL
WHERE kind = 'usage'
  AND at >= now() - {days:UInt32} * 86400
  AND ({team:String} = '' OR team = {team:String})
GROUP BY team, node_group
ORDER BY team, node_group
