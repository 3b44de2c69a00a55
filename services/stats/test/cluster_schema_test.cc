// The cluster form of relay's schema statements (cluster_schema.h): what
// `relay-stats migrate` applies on a cluster, for any migration.
#include "relay/stats/cluster_schema.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "relay/stats/migrate.h"

namespace relay::stats {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const ClusterTarget kTarget{"relay", "db1"};

// The statements' SQL, each marked "[each shard] " when it is run per shard.
std::vector<std::string> Sql(const absl::StatusOr<std::vector<ClusterStatement>>& out) {
  std::vector<std::string> sql;
  if (out.ok()) {
    for (const auto& st : *out) sql.push_back((st.per_shard ? "[each shard] " : "") + st.sql);
  }
  return sql;
}

TEST(ClusterSchema, ATableBecomesAReplicatedLocalTableAndADistributedOne) {
  auto out = ClusterStatements(
      "CREATE TABLE IF NOT EXISTS dispatches (\n  request_id String,\n  version UInt64\n) ENGINE = "
      "ReplacingMergeTree(version)\nPARTITION BY toYYYYMM(dispatched_at)\nORDER BY request_id",
      kTarget);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(Sql(out), ElementsAre("CREATE TABLE IF NOT EXISTS db1.dispatches_local ON CLUSTER 'relay' (\n"
                                "  request_id String,\n  version UInt64\n) ENGINE = ReplicatedReplacingMergeTree("
                                "'/clickhouse/tables/{shard}/db1/dispatches_local', '{replica}', version)\n"
                                "PARTITION BY toYYYYMM(dispatched_at) ORDER BY request_id",
                                "CREATE TABLE IF NOT EXISTS db1.dispatches ON CLUSTER 'relay' AS db1.dispatches_local\n"
                                "ENGINE = Distributed('relay', db1, dispatches_local, cityHash64(request_id))"));
}

// A table no one chose a key for (a migration merged later) is sharded by
// its whole ORDER BY: every version of a row on one shard. A table of
// another database and an engine without arguments keep theirs.
TEST(ClusterSchema, ANewTableIsShardedByItsSortingKey) {
  auto out = ClusterStatements(
      "CREATE TABLE IF NOT EXISTS default.hud_things (a String, b DateTime64(9, 'UTC'), c Nested(x String, y UInt8)) "
      "ENGINE = ReplacingMergeTree ORDER BY (a, b)",
      kTarget);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 2u);
  EXPECT_THAT((*out)[0].sql, HasSubstr("default.hud_things_local ON CLUSTER 'relay' ("));
  EXPECT_THAT((*out)[0].sql, HasSubstr("c Nested(x String, y UInt8)"));
  EXPECT_THAT((*out)[0].sql, HasSubstr("ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/default/"
                                       "hud_things_local', '{replica}')\nORDER BY (a, b)"));
  EXPECT_THAT((*out)[1].sql, HasSubstr("Distributed('relay', default, hud_things_local, cityHash64(a, b))"));
}

// An ALTER of a replicated table runs once per shard, not ON CLUSTER (18.16's
// DDL worker races there); the Distributed table's column change ON CLUSTER.
TEST(ClusterSchema, AColumnChangeAltersBothTablesOtherStatementsGetOnCluster) {
  auto alter = ClusterStatements("ALTER TABLE github_outcomes ADD COLUMN IF NOT EXISTS scope String", kTarget);
  ASSERT_TRUE(alter.ok()) << alter.status();
  EXPECT_THAT(Sql(alter),
              ElementsAre("[each shard] ALTER TABLE db1.github_outcomes_local ADD COLUMN IF NOT EXISTS scope String",
                          "ALTER TABLE db1.github_outcomes ON CLUSTER 'relay' ADD COLUMN IF NOT EXISTS scope String"));
  auto del = ClusterStatements("ALTER TABLE dispatches DELETE WHERE 1", kTarget);
  EXPECT_THAT(Sql(del), ElementsAre("[each shard] ALTER TABLE db1.dispatches_local DELETE WHERE 1"));
  auto db = ClusterStatements("CREATE DATABASE IF NOT EXISTS misc", kTarget);
  EXPECT_THAT(Sql(db), ElementsAre("CREATE DATABASE IF NOT EXISTS misc ON CLUSTER 'relay'"));
  auto view = ClusterStatements("CREATE OR REPLACE VIEW default.push AS SELECT 1", kTarget);
  EXPECT_THAT(Sql(view), ElementsAre("CREATE OR REPLACE VIEW default.push ON CLUSTER 'relay' AS SELECT 1"));
  auto insert = ClusterStatements("INSERT INTO t VALUES (1)", kTarget);
  EXPECT_EQ(insert.status().code(), absl::StatusCode::kInvalidArgument);
  auto log = ClusterStatements("CREATE TABLE IF NOT EXISTS l (a String) ENGINE = Log", kTarget);
  EXPECT_THAT(log.status().message(), HasSubstr("engine Log has no cluster form"));
}

// A materialized view watches the shard's copy of its source and writes
// through the target's Distributed table; a copy of rows runs once.
TEST(ClusterSchema, AMaterializedViewWatchesTheLocalSourceAndWritesThroughTheDistributedTarget) {
  auto mv = ClusterStatements("CREATE MATERIALIZED VIEW IF NOT EXISTS hud_x_mv TO materialized_views.x AS\n"
                              "SELECT head_sha, toInt64(id) AS id FROM workflow_job WHERE id != 0",
                              kTarget);
  ASSERT_TRUE(mv.ok()) << mv.status();
  EXPECT_THAT(Sql(mv), ElementsAre("CREATE MATERIALIZED VIEW IF NOT EXISTS hud_x_mv ON CLUSTER 'relay' TO "
                                   "materialized_views.x AS SELECT head_sha, toInt64(id) AS id FROM "
                                   "db1.workflow_job_local WHERE id != 0"));
  auto join = ClusterStatements("CREATE MATERIALIZED VIEW IF NOT EXISTS m TO t AS SELECT a FROM x JOIN y USING a",
                                kTarget);
  EXPECT_THAT(join.status().message(), HasSubstr("one source"));
  auto copy = ClusterStatements("INSERT INTO hud_run_payload\nSELECT id FROM webhook_deliveries", kTarget);
  EXPECT_THAT(Sql(copy), ElementsAre("INSERT INTO hud_run_payload\nSELECT id FROM webhook_deliveries"));
  auto drop = ClusterStatements("DROP VIEW IF EXISTS materialized_views.x", kTarget);
  EXPECT_THAT(Sql(drop), ElementsAre("DROP VIEW IF EXISTS materialized_views.x ON CLUSTER 'relay'"));
}

// What reaches a clickhouse.url that does not answer: the error names the
// cluster's shard list query, not a crash (the shards are looked up there).
TEST(ClusterSchema, RunOnEveryShardFailsClearlyWithoutAServer) {
  clickhouse::ClientOptions o;
  o.url = "http://127.0.0.1:1";
  o.max_attempts = 1;
  o.connect_timeout = std::chrono::milliseconds(500);
  absl::Status st = RunOnEveryShard(o, "relay", "SELECT 1");
  EXPECT_FALSE(st.ok());
  o.url = "127.0.0.1";
  EXPECT_EQ(RunOnEveryShard(o, "relay", "SELECT 1").code(), absl::StatusCode::kInvalidArgument);
}

TEST(ClusterSchema, AMutationRunsOnTheLocalTablesOfEveryShard) {
  auto m = ClusterMutation(
      "ALTER TABLE test_flaky_daily DELETE\nWHERE (repo, day, computed_at_ms) NOT IN (SELECT repo, day, "
      "max(computed_at_ms) FROM test_flaky_daily GROUP BY repo, day)",
      kTarget);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(*m,
            "ALTER TABLE db1.test_flaky_daily_local DELETE\nWHERE (repo, day, computed_at_ms) NOT IN "
            "(SELECT repo, day, max(computed_at_ms) FROM db1.test_flaky_daily_local GROUP BY repo, day)");
}

// Every embedded migration has a cluster form, so the ones merged later
// come through `relay-stats migrate` on a cluster without an edit.
TEST(ClusterSchema, EveryMigrationHasAClusterForm) {
  auto migrations = LoadMigrations();
  ASSERT_TRUE(migrations.ok());
  auto variant = ClusterVariant({"{cluster}", "relay"});
  ASSERT_TRUE(variant.ok()) << variant.status();
  for (const Migration& m : *migrations) EXPECT_THAT(*variant, HasSubstr("-- " + m.name)) << m.name;
  EXPECT_THAT(*variant, HasSubstr("ENGINE = Distributed('{cluster}', relay, test_results_local, cityHash64(upload_id))"));
}

}  // namespace
}  // namespace relay::stats
