// relay-stats on a ClickHouse cluster (2 shards x 2 replicas of Debian's
// 18.16, one ZooKeeper: the clickhouse_cluster fixture) beside one server
// (the clickhouse fixture): the same records into both give the same
// answer to every named query, the tier report, the HUD pages and the CI
// files; migrate applies the cluster form of the schema and refuses a
// database of the other kind; the snapshot prunes run per shard; a move
// from one server to the cluster by a replay. Label `cluster`, on demand
// (tools/dev test --cluster).
#include <regex>

#include "stats_it_support.h"

namespace relay {
namespace {

using namespace stats_it;

std::map<std::string, std::string> Nodes(const std::string& dir) {
  std::map<std::string, std::string> out;
  std::istringstream in(ReadFile(dir + "/nodes"));
  std::string name, address;
  while (in >> name >> address) out[name] = address;
  return out;
}

// `sql` on one node of the cluster, in `database`.
std::string OnNode(const std::string& url, const std::string& database, const std::string& sql) {
  clickhouse::ClientOptions o;
  o.url = url;
  o.database = database;
  o.max_attempts = 1;
  auto c = clickhouse::Client::New(o);
  auto r = (*c)->Query(sql);
  EXPECT_TRUE(r.ok()) << url << ": " << sql << ": " << r.status();
  return r.ok() ? Trim(*r) : "";
}

// What relay-stats serves from the tables: the HUD's pages and the CI
// files, each body by path, read once a CI files refresh has started after
// the last row landed (the refresh counter moved twice past
// `refreshes_before`, read after it landed).
std::map<std::string, std::string> Served(uint16_t port, const std::string& repo, double refreshes_before) {
  std::string refreshes = "relay_stats_ci_file_refreshes_total{file=\"test-times.json\",result=\"ok\"}";
  EXPECT_TRUE(testing::WaitFor([&] { return testing::MetricValue(port, refreshes) >= refreshes_before + 2; }, 60s,
                               200ms));
  std::map<std::string, std::string> out;
  std::vector<std::string> paths = {"/hud", "/hud?days=30&per_page=50", "/hud/repo?name=" + repo, "/hud/tiers",
                                    "/hud/cost", "/hud/test?name=test_flaky&classname=TestOps",
                                    "/ci/test-times.json", "/ci/test-class-times.json", "/ci/slow-tests.json",
                                    "/ci/disabled-tests-condensed.json", "/ci/flaky-tests.json"};
  for (const std::string& path : paths) {
    auto r = HttpClient("127.0.0.1", port).Get(path);
    EXPECT_EQ(r.status, 200) << path << ": " << r.body;
    // The time a page was computed ("Verdicts as of ...") is its server's.
    static const std::regex kAsOf("as of [0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:]{8} UTC");
    out[path] = std::regex_replace(r.body, kAsOf, "as of (time)");
  }
  return out;
}

TEST(StatsItCluster, EveryQueryAnswersAsOnOneServer) {
  StatsStack one("one");
  StatsStack cluster("cluster", true, /*cluster=*/true);
  std::string out;
  ASSERT_EQ(cluster.Command("migrate", &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("on the cluster relay"));
  EXPECT_THAT(out, HasSubstr("applied 0001_tables.sql"));
  EXPECT_THAT(out, HasSubstr("skipped 0004_hud.sql: needs ClickHouse >= 23.3, the server is 18.16"));
  one.Migrate();
  // Every node has every table of one server's schema twice: as a
  // replicated local table and as a Distributed one (the ledger too).
  std::string tables = one.Query("SELECT count() FROM system.tables WHERE database = currentDatabase()");
  ASSERT_GT(std::stoi(tables), 10);
  for (const auto& [node, url] : Nodes(Env("RELAY_IT_CLICKHOUSE_CLUSTER_DIR"))) {
    if (node.rfind("zk-", 0) == 0) continue;
    EXPECT_EQ(OnNode(url, cluster.database(),
                     "SELECT countIf(engine = 'Distributed'), countIf(engine = 'ReplicatedReplacingMergeTree') "
                     "FROM system.tables WHERE database = currentDatabase() FORMAT CSV"),
              tables + "," + tables)
        << node;
  }
  EXPECT_EQ(cluster.Query("SELECT count() FROM schema_migrations FINAL"), one.Query("SELECT count() FROM schema_migrations FINAL"));

  Traffic t = MakeTraffic("cl" + Unique(), 12);
  ProduceTraffic(one, t);
  ProduceTraffic(cluster, t);
  // CI files every second, the test's repo as the upstream whose issues
  // may disable tests.
  std::map<std::string, std::string> env = {{"RELAY_STATS_CI_FILES_INTERVAL", "1s"},
                                            {"RELAY_STATS_CI_FILES_UPSTREAMS", t.repo}};
  uint16_t one_port = one.Start(1, env);
  ASSERT_NE(one_port, 0) << ReadFile(one.Log(1));
  env["RELAY_STATS_SNAPSHOT_PRUNE_INTERVAL"] = "1s";
  uint16_t port = cluster.Start(1, env);
  ASSERT_NE(port, 0) << ReadFile(cluster.Log(1));
  ExpectTables(one, t);
  ExpectTables(cluster, t);
  ASSERT_TRUE(one.RollupsSettled());
  ASSERT_TRUE(cluster.RollupsSettled());
  std::string refreshes = "relay_stats_ci_file_refreshes_total{file=\"test-times.json\",result=\"ok\"}";
  auto pages_one = Served(one_port, t.repo, testing::MetricValue(one_port, refreshes));
  auto pages_cluster = Served(port, t.repo, testing::MetricValue(port, refreshes));
  EXPECT_THAT(pages_one["/hud/repo?name=" + t.repo], HasSubstr("test_flaky"));
  EXPECT_THAT(pages_one["/ci/test-times.json"], HasSubstr("test_ops"));
  for (const auto& [path, body] : pages_one) {
    const std::string& other = pages_cluster[path];
    size_t at = std::mismatch(body.begin(), body.end(), other.begin(), other.end()).first - body.begin();
    EXPECT_EQ(other, body) << path << ": first difference at byte " << at << ": one server '"
                           << body.substr(at > 80 ? at - 80 : 0, 200) << "', cluster '"
                           << other.substr(at > 80 ? at - 80 : 0, 200) << "'";
  }

  // The rows are spread over both shards, each shard's on both replicas.
  auto nodes = Nodes(Env("RELAY_IT_CLICKHOUSE_CLUSTER_DIR"));
  std::map<std::string, int64_t> rows;
  for (const char* n : {"s1r1", "s1r2", "s2r1", "s2r2"}) {
    rows[n] = std::stoll(OnNode(nodes.at(n), cluster.database(), "SELECT count() FROM test_results_local FINAL"));
  }
  EXPECT_EQ(rows["s1r1"], rows["s1r2"]);
  EXPECT_EQ(rows["s2r1"], rows["s2r2"]);
  EXPECT_EQ(rows["s1r1"] + rows["s2r1"], t.test_rows);
  EXPECT_GT(rows["s1r1"], 0);
  EXPECT_GT(rows["s2r1"], 0);

  auto single = one.RunAllQueries(t.repo);
  auto sharded = cluster.RunAllQueries(t.repo);
  ASSERT_EQ(sharded.size(), single.size());
  EXPECT_THAT(single["flaky_tests"], HasSubstr("test_flaky"));
  EXPECT_THAT(single["tier-report"], HasSubstr(t.repo));
  for (const auto& [name, result] : single) EXPECT_EQ(sharded[name], result) << name;

  // The reports again: every window is computed again, and the prune (ON
  // CLUSTER, on each shard's local tables) leaves only the latest
  // computation of each window, as on one server.
  auto snapshot_rows = [&] {
    return cluster.Count("SELECT count() FROM test_slowest_daily") + cluster.Count("SELECT count() FROM test_flaky_daily");
  };
  auto latest_rows = [&] {
    int64_t n = 0;
    for (const char* table : {"test_slowest_daily", "test_flaky_daily"}) {
      n += cluster.Count(std::string("SELECT count() FROM ") + table + " WHERE (repo, day, computed_at_ms) IN (SELECT "
                         "repo, day, max(computed_at_ms) FROM " + table + " GROUP BY repo, day)");
    }
    return n;
  };
  int64_t before = latest_rows();
  ASSERT_GT(before, 0);
  cluster.Produce("ci.test_reports", t.reports);
  ASSERT_TRUE(testing::WaitFor([&] {
    return testing::MetricValue(port, "relay_stats_rows_inserted_total{table=\"test_results\"}") == 2 * t.test_rows;
  }, 60s, 200ms));
  ASSERT_TRUE(cluster.RollupsSettled());
  EXPECT_TRUE(testing::WaitFor([&] { return snapshot_rows() == latest_rows(); }, 60s, 500ms))
      << snapshot_rows() << " snapshot rows, " << latest_rows() << " of the latest computations";
  EXPECT_EQ(latest_rows(), before);
  EXPECT_GE(testing::MetricValue(port, "relay_stats_snapshot_prunes_total"), 1);
  auto again = cluster.RunAllQueries(t.repo);
  for (const auto& [name, result] : single) EXPECT_EQ(again[name], result) << name;
}

// A database migrated for one server is refused as a cluster's, and the
// other way round, by migrate and by readiness: either would write past
// what the schema guarantees.
TEST(StatsItCluster, ADatabaseOfTheOtherKindIsRefused) {
  StatsStack one("kind_one");
  one.Migrate();
  std::string out;
  EXPECT_NE(testing::RunCommand(one.EnvPrefix() + " RELAY_STATS_CLICKHOUSE_CLUSTER=relay " +
                                    Env("RELAY_IT_STATS_BIN") + " migrate 2>&1",
                                &out),
            0);
  EXPECT_THAT(out, HasSubstr("stats.clickhouse.cluster is set but this database holds a single-node schema"));

  StatsStack cluster("kind_cluster", true, /*cluster=*/true);
  ASSERT_EQ(cluster.Command("migrate", &out), 0) << out;
  out.clear();
  EXPECT_NE(testing::RunCommand(cluster.EnvPrefix() + " RELAY_STATS_CLICKHOUSE_CLUSTER= " + Env("RELAY_IT_STATS_BIN") +
                                    " migrate 2>&1",
                                &out),
            0);
  EXPECT_THAT(out, HasSubstr("this database was migrated for a cluster: set stats.clickhouse.cluster"));
}

// The way from one server to a cluster (docs/capacity.md, "Moving to a
// cluster"): relay's topics are the source of truth, so a relay-stats on
// the cluster, in a consumer group of its own, reads every input from the
// start of its retention while the single server's goes on; once it has
// caught up, every named query and the tier report answer as on the single
// server.
TEST(StatsItCluster, MovingToAClusterByReplayingTheTopics) {
  StatsStack one("move_one");
  one.Migrate();
  Traffic t = MakeTraffic("mv" + Unique(), 12);
  ProduceTraffic(one, t);
  ASSERT_NE(one.Start(1), 0) << ReadFile(one.Log(1));
  ExpectTables(one, t);
  ASSERT_TRUE(one.RollupsSettled());

  StatsStack cluster("move_cluster", true, /*cluster=*/true);
  std::string out;
  ASSERT_EQ(cluster.Command("migrate", &out), 0) << out;
  // The single server's topics, a group of the cluster's own.
  std::map<std::string, std::string> env = {{"RELAY_KAFKA_GROUP_ID", "it-stats-cluster-move-" + Unique()}};
  for (auto [key, topic] : {std::pair{"WEBHOOKS", "github.webhooks"}, std::pair{"DISPATCHES", "relay.dispatches"},
                            std::pair{"OUTCOMES", "github.outcomes"}, std::pair{"RESULTS", "ci.results"},
                            std::pair{"TEST_REPORTS", "ci.test_reports"}, std::pair{"CLUSTER_EVENTS", "cluster.events"}}) {
    env[std::string("RELAY_STATS_TOPICS_") + key] = one.Topic(topic);
  }
  ASSERT_NE(cluster.Start(1, env), 0) << ReadFile(cluster.Log(1));
  ExpectTables(cluster, t);
  ASSERT_TRUE(cluster.RollupsSettled());
  auto single = one.RunAllQueries(t.repo);
  auto sharded = cluster.RunAllQueries(t.repo);
  ASSERT_EQ(sharded.size(), single.size());
  for (const auto& [name, result] : single) EXPECT_EQ(sharded[name], result) << name;
}

}  // namespace
}  // namespace relay
