// What the stats integration tests share (stats_it_test.cc, stats_it_ci_test.cc): the
// stack (broker, ClickHouse, relay-stats as a process), the records as the other
// services write them, and the checks of the tables.
#pragma once
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <set>
#include <thread>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <boost/json.hpp>
#include "relay/base/digest.h"
#include "relay/clickhouse/client.h"
#include "relay/github/webhook_signature.h"
#include "relay/kafka/consumer.h"
#include "relay/kafka/producer.h"
#include "relay/v1/cluster.pb.h"
#include "relay/v1/collector.pb.h"
#include "relay/v1/dispatch.pb.h"
#include "relay/v1/github.pb.h"
#include "relay/v1/webhook.pb.h"
#include "support/fixtures.h"
#include "support/http_client.h"
#include "support/kafka_admin.h"
#include "support/subprocess.h"
#include "support/timing.h"
#include "support/topic_reader.h"

namespace relay::stats_it {


namespace json = boost::json;
using testing::Env;
using testing::HttpClient;
using testing::ReadFile;
using testing::Subprocess;
using testing::Unique;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

inline constexpr const char* kInputs[] = {"github.webhooks", "relay.dispatches", "github.outcomes",
                                   "ci.results",      "ci.test_reports",  "cluster.events"};

inline int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

inline std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// The raw 32 bytes (WebhookRecord.body_sha256).
inline std::string Sha256Bytes(std::string_view data) {
  auto d = relay::Sha256(data);
  return std::string(reinterpret_cast<const char*>(d.data()), d.size());
}

// SQL of a file under deploy/clickhouse without its comment lines.
inline std::string SqlFile(const std::string& rel) {
  std::istringstream in(ReadFile(Env("RELAY_ROOT") + "/deploy/clickhouse/" + rel));
  std::string out, line;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(' ') != std::string::npos && line.substr(line.find_first_not_of(' '), 2) == "--") continue;
    out += line + "\n";
  }
  return out;
}

// Topics, a consumer group and a ClickHouse database of one test, the
// relay-stats processes, and a producer for the inputs.
class StatsStack {
 public:
  // `dead_letter_topics`: false leaves the inputs' .dlq topics out (a
  // consumer that must dead-letter then stops for good).
  // `cluster`: the ClickHouse is the cluster of RELAY_IT_CLICKHOUSE_CLUSTER_DIR
  // (relay-stats with stats.clickhouse.cluster set to its name).
  explicit StatsStack(const std::string& name, bool dead_letter_topics = true, bool cluster = false)
      : dir_(Env("RELAY_IT_DIR") + "/stats-" + name + "-" + Unique()),
        prefix_("it" + Unique() + "."),
        database_("it_" + name + "_" + Unique()),
        clickhouse_dir_(Env(cluster ? "RELAY_IT_CLICKHOUSE_CLUSTER_DIR" : "RELAY_IT_CLICKHOUSE_DIR")),
        url_(Trim(ReadFile(clickhouse_dir_ + "/url"))),
        cluster_(cluster ? Trim(ReadFile(clickhouse_dir_ + "/cluster")) : "") {
    testing::RunCommand("mkdir -p " + dir_);
    for (const char* t : kInputs) {
      EXPECT_EQ(testing::CreateTopic(testing::FixtureBootstrap(), Topic(t), 3), "");
      if (dead_letter_topics) {
        EXPECT_EQ(testing::CreateTopic(testing::FixtureBootstrap(), Topic(t) + ".dlq", 1), "");
      }
    }
    kafka::ProducerOptions po;
    po.bootstrap = testing::FixtureBootstrap();
    producer_ = std::move(*kafka::NewKafkaProducer(po, nullptr));
    clickhouse::ClientOptions co;
    co.url = url_;
    co.database = database_;
    co.max_attempts = 1;
    // The test's own reads see every shard once, as relay-stats' do (its
    // ClusterReadSettings, stats_service.cc, which says why).
    if (!cluster_.empty()) co.settings = {{"distributed_product_mode", "global"}, {"prefer_localhost_replica", "0"}};
    client_ = std::move(*clickhouse::Client::New(co));
  }
  ~StatsStack() {
    procs_.clear();
    clickhouse::ClientOptions co;
    co.url = url_;
    if (auto c = clickhouse::Client::New(co); c.ok()) {
      (void)(*c)->Query("DROP DATABASE IF EXISTS " + database_ + (cluster_.empty() ? "" : " ON CLUSTER " + cluster_));
    }
  }
  const std::string& cluster() const { return cluster_; }

  std::string Topic(const std::string& t) const { return prefix_ + t; }
  const std::string& database() const { return database_; }
  const std::string& clickhouse_dir() const { return clickhouse_dir_; }

  // Produces and waits for every ack.
  void Produce(const std::string& topic, std::vector<std::pair<std::string, std::string>> records) {
    std::vector<std::future<absl::Status>> acks;
    for (auto& [key, value] : records) {
      auto p = std::make_shared<std::promise<absl::Status>>();
      acks.push_back(p->get_future());
      producer_->Send(kafka::Record{Topic(topic), key, std::move(value), {}}, [p](absl::Status s) { p->set_value(s); });
    }
    for (auto& a : acks) ASSERT_TRUE(a.get().ok());
  }

  std::map<std::string, std::string> Environment(std::map<std::string, std::string> env = {}) const {
    env.emplace("RELAY_CLICKHOUSE_URL", url_);
    env.emplace("RELAY_CLICKHOUSE_DATABASE", database_);
    if (!cluster_.empty()) env.emplace("RELAY_STATS_CLICKHOUSE_CLUSTER", cluster_);
    return env;
  }
  std::string EnvPrefix() const {
    std::string out = "env";
    for (const auto& [k, v] : Environment()) out += " " + k + "=" + v;
    return out;
  }

  // Runs `relay-stats ARGS`; its stdout in *out.
  int Command(const std::string& args, std::string* out) {
    return testing::RunCommand(EnvPrefix() + " " + testing::Env("RELAY_IT_STATS_BIN") + " " + args + " 2>>" + dir_ +
                                   "/commands.log",
                               out);
  }
  void Migrate() {
    std::string out;
    ASSERT_EQ(Command("migrate", &out), 0) << out << ReadFile(dir_ + "/commands.log");
  }

  uint16_t Start(int n, std::map<std::string, std::string> env = {}) {
    std::string port_file = dir_ + "/stats" + std::to_string(n) + ".port";
    std::remove(port_file.c_str());
    env.emplace("RELAY_HTTP_LISTEN", "127.0.0.1:0");
    env.emplace("RELAY_HTTP_DRAIN_DELAY", "0s");
    env.emplace("RELAY_KAFKA_BOOTSTRAP", testing::FixtureBootstrap());
    env.emplace("RELAY_KAFKA_GROUP_ID", "it-stats-" + prefix_ + std::to_string(n));
    env.emplace("RELAY_STATS_BATCH_INTERVAL", "200ms");
    env.emplace("RELAY_STATS_ROLLUP_INTERVAL", "200ms");
    env.emplace("RELAY_STATS_ROLLUP_WINDOW_INTERVAL", "0s");
    for (const char* t : kInputs) {
      std::string key = std::string(t) == "github.webhooks"    ? "WEBHOOKS"
                        : std::string(t) == "relay.dispatches" ? "DISPATCHES"
                        : std::string(t) == "github.outcomes"  ? "OUTCOMES"
                        : std::string(t) == "ci.results"       ? "RESULTS"
                        : std::string(t) == "ci.test_reports"  ? "TEST_REPORTS"
                                                               : "CLUSTER_EVENTS";
      env.emplace("RELAY_STATS_TOPICS_" + key, Topic(t));
    }
    procs_[n] = std::make_unique<Subprocess>(
        std::vector<std::string>{testing::Env("RELAY_IT_STATS_BIN"), "--port-file", port_file}, Environment(std::move(env)),
        Log(n));
    if (!testing::WaitForFile(port_file, 30s)) return 0;
    uint16_t port = static_cast<uint16_t>(std::stoi(ReadFile(port_file)));
    auto deadline = std::chrono::steady_clock::now() + 60s;
    std::string last;
    while (std::chrono::steady_clock::now() < deadline) {
      auto r = HttpClient("127.0.0.1", port).Get("/readyz");
      if (r.status == 200) return port;
      last = std::to_string(r.status) + " " + r.body;
      std::this_thread::sleep_for(100ms);
    }
    ADD_FAILURE() << "relay-stats " << n << " not ready in 60 s; /readyz said: " << last;
    return 0;
  }
  void Stop(int n) { procs_.erase(n); }
  Subprocess& proc(int n) { return *procs_.at(n); }
  std::string Log(int n) const { return dir_ + "/stats" + std::to_string(n) + ".log"; }

  std::string Query(const std::string& sql) {
    auto r = client_->Query(sql);
    EXPECT_TRUE(r.ok()) << sql << ": " << r.status();
    return r.ok() ? Trim(*r) : "";
  }
  int64_t Count(const std::string& sql) {
    std::string v = Query(sql);
    return v.empty() ? -1 : std::stoll(v);
  }
  // Waits until `sql` (one number) equals `want`; the last value otherwise.
  int64_t WaitCount(const std::string& sql, int64_t want, std::chrono::seconds timeout = 90s) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    int64_t got = -1;
    while (std::chrono::steady_clock::now() < deadline) {
      auto r = client_->Query(sql);
      if (r.ok() && (got = std::stoll(Trim(*r))) == want) return got;
      std::this_thread::sleep_for(200ms);
    }
    return got;
  }
  // Every rollup window marked has been recomputed since.
  bool RollupsSettled() {
    return WaitCount("SELECT count() FROM (" + SqlFile("rollups/pending_windows.sql") + ")", 0) == 0;
  }

  // Every named dashboard query, with its defaults, and again for `repo`
  // where it takes one: name -> the TSV it answered.
  std::map<std::string, std::string> RunAllQueries(const std::string& repo) {
    std::map<std::string, std::string> out;
    std::string list;
    EXPECT_EQ(Command("query --list", &list), 0);
    std::istringstream in(list);
    std::string line, name;
    std::vector<std::pair<std::string, bool>> queries;  // name, takes repo
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      if (line[0] != '\t') queries.emplace_back(line.substr(0, line.find('\t')), false);
      else if (line.find("--param repo=") != std::string::npos) queries.back().second = true;
    }
    EXPECT_GE(queries.size(), 12u);
    for (const auto& [q, takes_repo] : queries) {
      std::string result;
      EXPECT_EQ(Command("query " + q + " --format TSVWithNames", &result), 0) << q;
      out[q] = result;
      if (takes_repo) {
        EXPECT_EQ(Command("query " + q + " --param repo=" + repo + " --format TSVWithNames", &result), 0) << q;
        out[q + "@repo"] = result;
      }
    }
    std::string tier;
    EXPECT_EQ(Command("tier-report --json", &tier), 0);
    out["tier-report"] = tier;
    return out;
  }

 private:
  std::string dir_, prefix_, database_, clickhouse_dir_, url_, cluster_;
  std::unique_ptr<kafka::Producer> producer_;
  std::unique_ptr<clickhouse::Client> client_;
  std::map<int, std::unique_ptr<Subprocess>> procs_;
};

// --- records as the other services write them --------------------------------

inline std::string JsonString(const json::value& v, std::initializer_list<const char*> path) {
  const json::value* cur = &v;
  for (const char* k : path) {
    if (!cur->is_object() || !cur->get_object().contains(k)) return "";
    cur = &cur->get_object().at(k);
  }
  return cur->is_string() ? std::string(cur->get_string()) : "";
}

struct Traffic {
  std::vector<std::pair<std::string, std::string>> webhooks, dispatches, outcomes, results, reports, clusters;
  int64_t workflow_jobs = 0, workflow_runs = 0, completed_job_id = 0;
  int64_t jobs = 0, test_rows = 0, webhook_count = 0;
  int64_t superseded = 0;  // coalesced dispatches: an outcome each, no dispatch
  std::string repo;  // one downstream repo, for per-repo queries
};

// Every corpus payload as intake records it, and a small CI history: for
// each of `deliveries` upstream deliveries (in pairs sharing a head sha),
// a dispatch to each downstream repo, its GitHub outcome, the job's two
// result versions and a test report in two batches.
inline Traffic MakeTraffic(const std::string& tag, int deliveries) {
  Traffic t;
  int64_t now = NowMs();
  std::set<int64_t> job_ids;
  std::set<std::pair<int64_t, int64_t>> run_ids;
  int i = 0;
  for (const auto& p : testing::LoadCorpus()) {
    json::value doc = json::parse(p.body);
    v1::WebhookRecord w;
    w.set_delivery_id(tag + "-wh-" + std::to_string(i++));
    w.set_event(p.event);
    w.set_action(JsonString(doc, {"action"}));
    w.set_repository(JsonString(doc, {"repository", "full_name"}));
    w.set_received_at_unix_ms(now - 3'600'000);
    w.set_body(p.body);
    w.set_content_type("application/json");
    w.set_body_sha256(Sha256Bytes(p.body));
    t.webhooks.emplace_back(w.delivery_id(), w.SerializeAsString());
    if (p.event == "workflow_job") {
      int64_t id = doc.at("workflow_job").at("id").to_number<int64_t>();
      job_ids.insert(id);
      if (JsonString(doc, {"workflow_job", "status"}) == "completed") t.completed_job_id = id;
    }
    if (p.event == "workflow_run") {
      const auto& run = doc.at("workflow_run").as_object();
      int64_t attempt = run.contains("run_attempt") ? run.at("run_attempt").to_number<int64_t>() : 1;
      run_ids.insert({run.at("id").to_number<int64_t>(), attempt});
    }
  }
  t.webhook_count = static_cast<int64_t>(t.webhooks.size());
  t.workflow_jobs = static_cast<int64_t>(job_ids.size());
  t.workflow_runs = static_cast<int64_t>(run_ids.size());

  const std::vector<std::pair<std::string, int>> repos = {
      {tag + "-org/accel-a", 2}, {tag + "-org/accel-b", 3}, {tag + "-org/accel-c", 4}};
  t.repo = repos[0].first;
  for (int d = 0; d < deliveries; ++d) {
    std::string delivery = tag + "-up-" + std::to_string(d);
    std::string sha = "sha" + std::to_string(d / 2);  // pairs of deliveries share a commit
    int64_t dispatched = now - 2 * 3'600'000 + d * 60'000;
    for (const auto& [repo, level] : repos) {
      v1::DispatchRecord r;
      r.set_request_id(delivery + "/" + repo);
      r.set_delivery_id(delivery);
      r.set_upstream_repo("pytorch/pytorch");
      r.set_downstream_repo(repo);
      r.set_level(level);
      r.set_event("pull_request");
      r.set_action("synchronize");
      r.set_pr_number(100 + d / 2);
      r.set_head_sha(sha);
      r.set_dispatched_at_unix_ms(dispatched);
      t.dispatches.emplace_back(repo, r.SerializeAsString());

      v1::GitHubOutcome o;
      o.set_request_id(r.request_id());
      o.set_kind("dispatch");
      o.set_repo(repo);
      o.set_endpoint("POST /repos/{owner}/{repo}/dispatches");
      o.set_http_status(d % 7 == 0 ? 429 : 204);
      o.set_attempts(d % 7 == 0 ? 2 : 1);
      o.set_result("done");
      o.set_finished_at_unix_ms(dispatched);
      o.set_latency_ms(120 + d);
      o.set_level(level);
      o.set_delivery_id(delivery);
      t.outcomes.emplace_back(repo, o.SerializeAsString());

      std::string job_id = delivery + "/" + repo + "/1/1/test";
      bool failing = d % 5 == 4, timed_out = d % 11 == 10;
      for (int version = 1; version <= 2; ++version) {
        v1::JobResult j;
        j.set_job_id(job_id);
        j.set_version(version);
        auto* tr = j.mutable_trusted();
        tr->set_status(version == 1 ? "in_progress" : "completed");
        tr->set_verified_repo(repo);
        tr->set_level(level);
        tr->set_delivery_id(delivery);
        tr->set_upstream_repo("pytorch/pytorch");
        tr->set_pr_number(100 + d / 2);
        tr->set_head_sha(sha);
        tr->set_event("pull_request");
        tr->set_dispatched_at_unix_ms(dispatched);
        tr->set_started_at_unix_ms(dispatched + 60'000);
        tr->set_queue_time_ms(60'000);
        tr->set_execution_time_ms(version == 2 ? 1'200'000 : -1);
        tr->set_completed_at_unix_ms(version == 2 ? dispatched + 1'260'000 : 0);
        tr->set_timed_out_by_sweeper(version == 2 && timed_out);
        auto* rep = j.mutable_reported();
        rep->set_event_type("pull_request");
        rep->set_conclusion(version == 1 ? "" : timed_out ? "timed_out" : failing ? "failure" : "success");
        rep->set_workflow_name("accel-ci");
        rep->set_job_name("test");
        rep->set_run_id("1");
        rep->set_run_attempt("1");
        rep->set_has_test_results(version == 2);
        rep->set_tests_total(100);
        rep->set_tests_failed(failing ? 1 : 0);
        rep->set_tests_passed(failing ? 99 : 100);
        if (failing) rep->add_failed_tests("test_ops.py::TestOps::test_flaky");
        t.results.emplace_back(job_id, j.SerializeAsString());
      }
      ++t.jobs;
      // The report: test_flaky fails on the second delivery of each pair
      // where `failing`, so it both passed and failed on one sha.
      for (int seq = 0; seq < 2; ++seq) {
        v1::TestReportBatch b;
        b.set_upload_id(job_id + "#u");
        b.set_job_id(job_id);
        b.set_repo(repo);
        b.set_delivery_id(delivery);
        b.set_run_id("1");
        b.set_run_attempt("1");
        b.set_job_name("test");
        b.set_uploaded_at_unix_ms(dispatched + 1'250'000);
        b.set_seq(seq);
        b.set_last(seq == 1);
        b.set_total_cases(100);
        b.set_batches(2);
        for (int c = 0; c < 50; ++c) {
          auto* tc = b.add_cases();
          tc->set_file(seq == 0 ? "test_ops.py" : "test_nn.py");
          tc->set_classname(seq == 0 ? "TestOps" : "TestNN");
          tc->set_name(c == 0 && seq == 0 ? "test_flaky" : "test_" + std::to_string(c));
          tc->set_duration_s(0.25 * (c % 8 + 1));  // exact binary fractions: sums do not depend on order
          tc->set_outcome(c == 0 && seq == 0 && failing ? "failed" : c == 49 ? "skipped" : "passed");
          tc->set_reruns(c == 1 && seq == 1 ? 1 : 0);
          ++t.test_rows;
        }
        t.reports.emplace_back(job_id, b.SerializeAsString());
      }
    }
  }
  // Coalesced dispatches (never sent): the commit "coalesced" lost to a newer
  // head in repos a and b; sha0, dispatched to repo a, also had a later
  // event superseded there, so its cell stays a dispatched one.
  auto superseded = [&](const std::string& sha, const std::pair<std::string, int>& target, int n) {
    v1::GitHubOutcome o;
    o.set_request_id(tag + "-coalesced-" + std::to_string(n) + "/" + target.first);
    o.set_kind("dispatch");
    o.set_repo(target.first);
    o.set_endpoint("POST /repos/{owner}/{repo}/dispatches");
    o.set_result("superseded");
    o.set_error("superseded by " + tag + "-up-0/" + target.first);
    o.set_finished_at_unix_ms(now - 3'600'000 + n * 1000);
    o.set_level(target.second);
    o.set_delivery_id(tag + "-coalesced-" + std::to_string(n));
    o.set_upstream_repo("pytorch/pytorch");
    o.set_head_sha(sha);
    o.set_pr_number(100);
    o.set_superseded_by(tag + "-up-0/" + target.first);
    t.outcomes.emplace_back(target.first, o.SerializeAsString());
    ++t.superseded;
  };
  superseded("coalesced", repos[0], 0);
  superseded("coalesced", repos[1], 1);
  superseded("sha0", repos[0], 2);
  for (int c = 0; c < 4; ++c) {
    v1::ClusterEvent e;
    e.set_event_id(tag + "-ce-" + std::to_string(c));
    e.set_cluster_id(tag + "-cluster-" + std::to_string(c % 2));
    e.set_team(c % 2 ? "ml" : "ci");
    e.set_kind("usage");
    e.set_state("RUNNING");
    e.set_at_unix_ms(now - 600'000 + c * 1000);
    e.set_node_group("workers");
    e.set_nodes(2);
    e.set_cluster_seconds(60);
    e.set_node_seconds(120);
    e.set_provider("local");
    t.clusters.emplace_back(e.cluster_id(), e.SerializeAsString());
  }
  return t;
}

inline void ProduceTraffic(StatsStack& s, const Traffic& t) {
  s.Produce("github.webhooks", t.webhooks);
  s.Produce("relay.dispatches", t.dispatches);
  s.Produce("github.outcomes", t.outcomes);
  s.Produce("ci.results", t.results);
  s.Produce("ci.test_reports", t.reports);
  s.Produce("cluster.events", t.clusters);
}

// Every table holds exactly what the traffic carries, after FINAL.
inline void ExpectTables(StatsStack& s, const Traffic& t) {
  EXPECT_EQ(s.WaitCount("SELECT count() FROM webhook_deliveries FINAL", t.webhook_count), t.webhook_count);
  EXPECT_EQ(s.WaitCount("SELECT count() FROM workflow_job FINAL", t.workflow_jobs), t.workflow_jobs);
  EXPECT_EQ(s.WaitCount("SELECT count() FROM workflow_run FINAL", t.workflow_runs), t.workflow_runs);
  EXPECT_EQ(s.WaitCount("SELECT count() FROM dispatches FINAL", t.jobs), t.jobs);
  EXPECT_EQ(s.WaitCount("SELECT count() FROM github_outcomes FINAL", t.jobs + t.superseded), t.jobs + t.superseded);
  EXPECT_EQ(s.WaitCount("SELECT count() FROM superseded_dispatches FINAL", t.superseded), t.superseded);
  EXPECT_EQ(s.WaitCount("SELECT count() FROM crcr_workflow_job FINAL", t.jobs), t.jobs);
  EXPECT_EQ(s.WaitCount("SELECT count() FROM test_results FINAL", t.test_rows), t.test_rows);
  EXPECT_EQ(s.WaitCount("SELECT count() FROM cluster_events FINAL", 4), 4);
}

}  // namespace relay::stats_it
