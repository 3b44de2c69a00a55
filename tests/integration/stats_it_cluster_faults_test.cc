// relay-stats on the ClickHouse cluster under faults (issue 30, item 3),
// counted row by row after FINAL: a replica SIGKILLed mid-ingestion and
// started again; ZooKeeper stopped 30 s; a whole shard unreachable. In each,
// half of the records land, the fault comes, the other half is produced
// during it, and once the fault is over every table holds exactly what the
// records carry (nothing lost, nothing twice), on both replicas of each
// shard, without relay-stats being restarted. Part of stats_it_cluster_test
// (label `cluster`, on demand).
#include "stats_it_support.h"

namespace relay {
namespace {

using namespace stats_it;

std::string ClusterDir() { return Env("RELAY_IT_CLICKHOUSE_CLUSTER_DIR"); }
int Dev(const std::string& args) {
  return testing::RunCommand(Env("RELAY_ROOT") + "/tools/clickhouse/clickhouse-dev " + args + " " + " >/dev/null 2>&1");
}
int DevNode(const std::string& verb, const std::string& node) { return Dev(verb + " " + ClusterDir() + " " + node); }

std::string NodeUrl(const std::string& node) {
  std::istringstream in(ReadFile(ClusterDir() + "/nodes"));
  std::string name, address;
  while (in >> name >> address) {
    if (name == node) return address;
  }
  return "";
}

// The first or second half of each input.
Traffic Half(const Traffic& t, int which) {
  Traffic h = t;
  for (auto* v : {&h.webhooks, &h.dispatches, &h.outcomes, &h.results, &h.reports, &h.clusters}) {
    size_t mid = v->size() / 2;
    if (which == 0) v->resize(mid);
    else v->erase(v->begin(), v->begin() + static_cast<std::ptrdiff_t>(mid));
  }
  return h;
}

// Both replicas of each shard hold the same rows of `table`, and the
// shards together hold `want` after FINAL.
void ExpectReplicasEqual(const std::string& database, const std::string& table, int64_t want) {
  std::map<std::string, int64_t> n;
  for (const char* node : {"s1r1", "s1r2", "s2r1", "s2r2"}) {
    clickhouse::ClientOptions o;
    o.url = NodeUrl(node);
    o.database = database;
    o.max_attempts = 1;
    auto c = std::move(*clickhouse::Client::New(o));
    // Replication is asynchronous past the quorum: wait for it to settle.
    (void)c->Query("SYSTEM SYNC REPLICA " + table + "_local");
    auto r = c->Query("SELECT count() FROM " + table + "_local FINAL");
    ASSERT_TRUE(r.ok()) << node << ": " << r.status();
    n[node] = std::stoll(*r);
  }
  EXPECT_EQ(n["s1r1"], n["s1r2"]) << table;
  EXPECT_EQ(n["s2r1"], n["s2r2"]) << table;
  EXPECT_EQ(n["s1r1"] + n["s2r1"], want) << table;
}

void ExpectEverything(StatsStack& s, const Traffic& t) {
  // Exact counts after FINAL (a batch retried with other boundaries may
  // leave a second copy until a merge; FINAL collapses it).
  ExpectTables(s, t);
  ExpectReplicasEqual(s.database(), "test_results", t.test_rows);
  ExpectReplicasEqual(s.database(), "dispatches", t.jobs);
  ExpectReplicasEqual(s.database(), "crcr_workflow_job", t.jobs);
}

// relay-stats with short ClickHouse timeouts, so a fault's failed insert
// is seen in seconds (the quorum and distributed waits are half of it).
uint16_t StartStats(StatsStack& s) {
  return s.Start(1, {{"RELAY_CLICKHOUSE_TIMEOUT", "10s"}});
}

double InsertErrors(uint16_t port) {
  std::string body = HttpClient("127.0.0.1", port).Get("/metrics").body;
  double n = 0;
  std::istringstream in(body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("relay_stats_clickhouse_errors_total{", 0) == 0 && line.find("op=\"insert\"") != std::string::npos) {
      n += std::stod(line.substr(line.rfind(' ') + 1));
    }
  }
  return n;
}

// The first half of `t` produced and being stored by a relay-stats on the
// cluster (its port; 0 if it did not start or store anything).
uint16_t FirstHalfLanding(StatsStack& s, const Traffic& t) {
  s.Migrate();
  ProduceTraffic(s, Half(t, 0));
  uint16_t port = StartStats(s);
  EXPECT_NE(port, 0) << ReadFile(s.Log(1));
  if (port == 0 || s.WaitCount("SELECT count() > 0 FROM test_results", 1) != 1) return 0;
  return port;
}

TEST(StatsItClusterFaults, AReplicaKilledMidIngestionLosesAndDoublesNothing) {
  StatsStack s("fault_replica", true, /*cluster=*/true);
  Traffic t = MakeTraffic("fr" + Unique(), 12);
  uint16_t port = FirstHalfLanding(s, t);
  ASSERT_NE(port, 0);

  ASSERT_EQ(DevNode("kill", "s1r2"), 0);
  ProduceTraffic(s, Half(t, 1));
  // The quorum (2) cannot be met on shard 1: its inserts fail and are
  // retried; nothing of a failed batch is committed.
  EXPECT_TRUE(testing::WaitFor([&] { return InsertErrors(port) > 0; }, 60s, 500ms)) << ReadFile(s.Log(1));
  std::this_thread::sleep_for(5s);
  ASSERT_EQ(DevNode("start", "s1r2"), 0);
  ExpectEverything(s, t);
  ASSERT_TRUE(s.RollupsSettled());
}

TEST(StatsItClusterFaults, ZooKeeperStopped30sThenIngestionResumesByItself) {
  StatsStack s("fault_zk", true, /*cluster=*/true);
  Traffic t = MakeTraffic("fz" + Unique(), 12);
  uint16_t port = FirstHalfLanding(s, t);
  ASSERT_NE(port, 0);

  ASSERT_EQ(DevNode("stop", "zk-1"), 0);
  auto stopped = std::chrono::steady_clock::now();
  ProduceTraffic(s, Half(t, 1));
  // Without ZooKeeper the replicated tables take no insert: each fails
  // with ClickHouse's error, counted, and the batch waits.
  EXPECT_TRUE(testing::WaitFor([&] { return InsertErrors(port) > 0; }, 30s, 500ms)) << ReadFile(s.Log(1));
  std::this_thread::sleep_until(stopped + 30s);
  ASSERT_EQ(DevNode("start", "zk-1"), 0);
  ExpectEverything(s, t);
  ASSERT_TRUE(s.RollupsSettled());
}

TEST(StatsItClusterFaults, AShardUnreachableStopsIngestionAndReadinessSaysWhy) {
  StatsStack s("fault_shard", true, /*cluster=*/true);
  Traffic t = MakeTraffic("fs" + Unique(), 12);
  uint16_t port = FirstHalfLanding(s, t);
  ASSERT_NE(port, 0);

  ASSERT_EQ(DevNode("kill", "s2r1"), 0);
  ASSERT_EQ(DevNode("kill", "s2r2"), 0);
  ProduceTraffic(s, Half(t, 1));
  std::string why;
  EXPECT_TRUE(testing::WaitFor([&] {
    auto r = HttpClient("127.0.0.1", port).Get("/readyz");
    why = r.body;
    return r.status == 503 && why.find("shard") != std::string::npos;
  }, 60s, 500ms)) << why;
  EXPECT_THAT(why, HasSubstr("a shard of cluster relay is unreachable"));
  EXPECT_THAT(why, HasSubstr("127.0.0.1"));
  EXPECT_TRUE(testing::WaitFor([&] { return InsertErrors(port) > 0; }, 30s, 500ms));

  ASSERT_EQ(DevNode("start", "s2r1"), 0);
  ASSERT_EQ(DevNode("start", "s2r2"), 0);
  EXPECT_TRUE(testing::WaitFor([&] { return HttpClient("127.0.0.1", port).Get("/readyz").status == 200; }, 60s, 500ms));
  ExpectEverything(s, t);
  ASSERT_TRUE(s.RollupsSettled());
}

}  // namespace
}  // namespace relay
