-- Cluster cost per team and node group over the last {days} days: cluster-seconds and node-seconds from relay-lifecycle's usage events.
-- param: days UInt32 30
-- param: team String
SELECT
    team,
    node_group,
    uniqExact(cluster_id) AS clusters,
    sum(cluster_seconds) AS cluster_seconds,
    sum(node_seconds) AS node_seconds
FROM cluster_events FINAL
WHERE kind = 'usage'
  AND at >= now() - {days:UInt32} * 86400
  AND ({team:String} = '' OR team = {team:String})
GROUP BY team, node_group
ORDER BY team, node_group
