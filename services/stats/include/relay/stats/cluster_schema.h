// relay's schema on a ClickHouse cluster (shards x replicas): the cluster
// form of each single-node statement, made when it is applied, so every
// migration (deploy/clickhouse/migrations) comes through without an edit of
// its own. docs/capacity.md ("The cluster layout") explains the layout.
//
// A table `T` (CREATE TABLE ... ENGINE = <X>MergeTree(args)) becomes
//   DB.T_local ON CLUSTER C: Replicated<X>MergeTree(
//       '/clickhouse/tables/{shard}/DB/T_local', '{replica}', args), the same
//       columns, partition and sorting keys;
//   DB.T ON CLUSTER C: Distributed(C, DB, T_local, KEY), what relay-stats
//       writes to and every query reads.
// KEY hashes the table's identity (a prefix of its ORDER BY, chosen per
// table in cluster_schema.cc; by default the whole ORDER BY), so every
// version of a row lands on one shard and FINAL, which works per shard,
// still collapses them. CREATE DATABASE / VIEW / FUNCTION get ON CLUSTER.
// ALTER TABLE T applies to T_local once per shard (RunOnEveryShard: the
// replicated table passes it on to the shard's replicas) and, for a column
// change, to the Distributed T ON CLUSTER as well. Not ALTER ... ON CLUSTER
// on the replicated tables: 18.16's DDL worker races there (two replicas of
// a shard both run it, the second fails on ZooKeeper's "Node exists" and
// that node's DDL queue stops; seen in stats_it_cluster_test). Anything
// else has no cluster form (an error).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "relay/clickhouse/client.h"

namespace relay::stats {

struct ClusterTarget {
  std::string cluster;   // a remote_servers name, or '{cluster}' (the macro) for the printed variant
  std::string database;  // relay's database: unqualified names are its tables
};

struct ClusterStatement {
  std::string sql;
  bool per_shard = false;  // run with RunOnEveryShard; otherwise once (it says ON CLUSTER)
};

// The cluster form of one single-node schema statement (one or two
// statements). InvalidArgument for a statement with no cluster form.
absl::StatusOr<std::vector<ClusterStatement>> ClusterStatements(std::string_view statement,
                                                                const ClusterTarget& target);

// A mutation of one of relay's tables (ALTER TABLE T DELETE WHERE ..., the
// snapshot prunes) for one shard (RunOnEveryShard): on T_local, every
// mention of T inside it (its subqueries) read on the same shard's T_local.
// Correct only where what the statement reads together lives on one shard
// (the prunes: a window (repo, day) is on one shard, by its table's key).
absl::StatusOr<std::string> ClusterMutation(std::string_view statement, const ClusterTarget& target);

// Runs `sql` once on each shard of `cluster`, on the first of its replicas
// that takes it (a statement on a replicated table reaches the shard's other
// replicas through ZooKeeper). The replicas are found in system.clusters,
// through `options` (the node relay-stats is configured with), and reached
// by HTTP at the URL their macro relay_http_url declares, or else at their
// host_name on the port (and scheme) of options.url, as a deployment's
// nodes all serve HTTP on one port. Unavailable, naming the shard, when
// none of a shard's replicas took it (the others have).
absl::Status RunOnEveryShard(const clickhouse::ClientOptions& options, std::string_view cluster, std::string_view sql);

// Every embedded migration in cluster form, with a comment per migration:
// deploy/clickhouse/cluster/relay-cluster.sql is this for
// {'{cluster}', "relay"} (`relay-stats cluster-schema`).
absl::StatusOr<std::string> ClusterVariant(const ClusterTarget& target);

}  // namespace relay::stats
