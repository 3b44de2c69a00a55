// The ClickHouse launcher's cluster (tools/clickhouse/clickhouse-dev start DIR
// --cluster): 2 shards x 2 replicas of Debian's 18.16 and one ZooKeeper, on
// free loopback ports. Checked here: the cluster as each node sees it, the
// schema's cluster variant (deploy/clickhouse/cluster/relay-cluster.sql) on
// it, and one node killed and started again by name. Label `cluster`, on
// demand (tools/dev test --cluster).
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "relay/clickhouse/client.h"
#include "support/subprocess.h"
#include "support/timing.h"

namespace relay {
namespace {

using namespace std::chrono_literals;
using testing::Env;
using testing::ReadFile;

std::string Dir() { return Env("RELAY_IT_CLICKHOUSE_CLUSTER_DIR"); }
std::string Dev(const std::string& args) {
  return Env("RELAY_ROOT") + "/tools/clickhouse/clickhouse-dev " + args;
}

// name -> URL (ClickHouse) or host:port (ZooKeeper), from DIR/nodes.
std::map<std::string, std::string> Nodes() {
  std::map<std::string, std::string> out;
  std::istringstream in(ReadFile(Dir() + "/nodes"));
  std::string name, address;
  while (in >> name >> address) out[name] = address;
  return out;
}

std::unique_ptr<clickhouse::Client> Connect(const std::string& url, const std::string& database = "default") {
  clickhouse::ClientOptions o;
  o.url = url;
  o.database = database;
  o.max_attempts = 1;
  return std::move(*clickhouse::Client::New(o));
}

std::string Q(clickhouse::Client& c, const std::string& sql) {
  auto r = c.Query(sql);
  EXPECT_TRUE(r.ok()) << sql << ": " << r.status();
  std::string s = r.ok() ? *r : "";
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

TEST(ClickHouseClusterIT, TwoShardsTwoReplicasOneZooKeeper) {
  auto nodes = Nodes();
  ASSERT_EQ(nodes.size(), 5u) << ReadFile(Dir() + "/nodes");
  EXPECT_EQ(Trim(ReadFile(Dir() + "/cluster")), "relay");
  for (const char* n : {"s1r1", "s1r2", "s2r1", "s2r2"}) {
    auto c = Connect(nodes.at(n));
    EXPECT_EQ(Q(*c, "SELECT shard_num, replica_num FROM system.clusters WHERE cluster = 'relay' "
                    "ORDER BY shard_num, replica_num FORMAT CSV"),
              "1,1\n1,2\n2,1\n2,2");
    std::string name(n);
    // cluster, relay_http_url (the node's own URL), replica, shard.
    EXPECT_EQ(Q(*c, "SELECT groupArray(substitution) FROM (SELECT substitution FROM system.macros ORDER BY macro)"),
              "['relay','" + nodes.at(n) + "','" + name + "','" + name.substr(1, 1) + "']");
    EXPECT_EQ(Q(*c, "SELECT count() > 0 FROM system.zookeeper WHERE path = '/'"), "1");
  }
}

// relay-cluster.sql, in a database of this test, on 18.16: every statement
// runs ON CLUSTER; a row inserted through a Distributed table lands on one
// shard's two replicas, and FINAL collapses its versions.
TEST(ClickHouseClusterIT, RunsTheClusterVariantOf1816) {
  auto nodes = Nodes();
  auto c = Connect(nodes.at("s1r1"));
  std::string db = "it_variant_" + testing::Unique();
  std::string sql = ReadFile(Env("RELAY_ROOT") + "/deploy/clickhouse/cluster/relay-cluster.sql");
  ASSERT_FALSE(sql.empty());
  // Every migration's section but those that need a newer server (their
  // header says so; relay-stats migrate skips them on 18.16 too).
  std::string text, line;
  std::istringstream in(sql);
  bool skip = false;
  while (std::getline(in, line)) {
    if (line.rfind("-- 0", 0) == 0) skip = line.find("(requires ClickHouse") != std::string::npos;
    if (line.rfind("--", 0) == 0 || skip) continue;
    text += line + "\n";
  }
  int statements = 0;
  size_t start = 0;
  for (size_t end; (end = text.find(';', start)) != std::string::npos; start = end + 1) {
    std::string st = text.substr(start, end - start);
    if (st.find_first_not_of(" \n") == std::string::npos) continue;
    for (auto [from, to] : {std::pair<std::string, std::string>{"relay.", db + "."}, {"DATABASE IF NOT EXISTS relay", "DATABASE IF NOT EXISTS " + db},
                            {"/relay/", "/" + db + "/"}, {"('{cluster}', relay,", "('{cluster}', " + db + ","}}) {
      for (size_t p; (p = st.find(from)) != std::string::npos;) st.replace(p, from.size(), to);
    }
    auto r = c->Query(st);
    ASSERT_TRUE(r.ok()) << st << ": " << r.status();
    ++statements;
  }
  EXPECT_GT(statements, 20);
  for (const char* n : {"s1r1", "s1r2", "s2r1", "s2r2"}) {
    auto node = Connect(nodes.at(n));
    EXPECT_EQ(Q(*node, "SELECT countIf(engine = 'ReplicatedReplacingMergeTree') = countIf(engine = 'Distributed') "
                       "AND count() > 20 FROM system.tables WHERE database = '" + db + "'"),
              "1") << n;
  }
  // Two versions of each of 100 jobs, sent through the Distributed table,
  // synchronously and acknowledged by both replicas of the shard.
  auto w = Connect(nodes.at("s1r1"), db);
  std::string values;
  for (int v = 1; v <= 2; ++v) {
    for (int id = 1; id <= 100; ++id) {
      values += (values.empty() ? "" : ",") + std::string("(") + std::to_string(id) + ", '" +
                (v == 1 ? "queued" : "completed") + "', toDateTime('2026-11-01 00:00:00'), " + std::to_string(v) + ")";
    }
  }
  clickhouse::ClientOptions o;
  o.url = nodes.at("s1r1");
  o.database = db;
  o.settings = {{"insert_distributed_sync", "1"}, {"insert_quorum", "2"}};
  auto writer = std::move(*clickhouse::Client::New(o));
  ASSERT_TRUE(writer->Query("INSERT INTO workflow_job (id, status, created_at, version) VALUES " + values).ok());
  EXPECT_EQ(Q(*w, "SELECT count(), countIf(status = 'completed') FROM workflow_job FINAL FORMAT CSV"), "100,100");
  // Every row on exactly one shard, on both of its replicas.
  std::map<std::string, int64_t> per_node;
  for (const char* n : {"s1r1", "s1r2", "s2r1", "s2r2"}) {
    per_node[n] = std::stoll(Q(*Connect(nodes.at(n), db), "SELECT count() FROM workflow_job_local FINAL"));
  }
  EXPECT_EQ(per_node["s1r1"], per_node["s1r2"]);
  EXPECT_EQ(per_node["s2r1"], per_node["s2r2"]);
  EXPECT_EQ(per_node["s1r1"] + per_node["s2r1"], 100);
  EXPECT_GT(per_node["s1r1"], 20);
  EXPECT_GT(per_node["s2r1"], 20);
  EXPECT_TRUE(c->Query("DROP DATABASE IF EXISTS " + db + " ON CLUSTER relay").ok());
}

// kill and start by name: the node killed misses an insert made while it
// is down, and has it once it is started again (replication catches up).
TEST(ClickHouseClusterIT, KillsAndStartsOneNodeByName) {
  auto nodes = Nodes();
  std::string db = "it_kill_" + testing::Unique();
  auto c = Connect(nodes.at("s1r1"));
  ASSERT_TRUE(c->Query("CREATE DATABASE " + db + " ON CLUSTER relay").ok());
  ASSERT_TRUE(c->Query("CREATE TABLE " + db + ".t ON CLUSTER relay (x UInt64) ENGINE = ReplicatedReplacingMergeTree("
                       "'/clickhouse/tables/{shard}/" + db + "/t', '{replica}') ORDER BY x").ok());
  ASSERT_EQ(testing::RunCommand(Dev("kill " + Dir() + " s1r2")), 0);
  EXPECT_NE(testing::RunCommand("curl -fsS " + nodes.at("s1r2") + "/ping >/dev/null 2>&1"), 0);
  EXPECT_EQ(Q(*c, "INSERT INTO " + db + ".t VALUES (1), (2), (3)"), "");
  ASSERT_EQ(testing::RunCommand(Dev("start " + Dir() + " s1r2")), 0);
  auto r2 = Connect(nodes.at("s1r2"));
  EXPECT_TRUE(testing::WaitFor([&] {
    auto n = r2->Query("SELECT count() FROM " + db + ".t");
    return n.ok() && *n == "3\n";
  }, 60s, 200ms));
  EXPECT_NE(testing::RunCommand(Dev("kill " + Dir() + " s9r9") + " 2>/dev/null"), 0);
  EXPECT_TRUE(c->Query("DROP DATABASE IF EXISTS " + db + " ON CLUSTER relay").ok());
}

}  // namespace
}  // namespace relay
