// relay-stats on the real Kafka broker and Debian's ClickHouse 18.16: every
// table filled from real webhook payloads (@octokit/webhooks-examples) and
// from records as dispatch and collector write them; a full replay that
// changes no query result; ClickHouse stopped mid-ingestion; poison records;
// the tier report's verdicts at each threshold; migrations applied twice;
// the disabled-tests list taking only trusted authors' upstream issues.
//
// Each test has its own topics (stats.topics.*), consumer group and
// ClickHouse database, so tests sharing the servers do not see each other.
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

namespace relay {
namespace {

namespace json = boost::json;
using testing::Env;
using testing::HttpClient;
using testing::ReadFile;
using testing::Subprocess;
using testing::Unique;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

constexpr const char* kInputs[] = {"github.webhooks", "relay.dispatches", "github.outcomes",
                                   "ci.results",      "ci.test_reports",  "cluster.events"};

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// The raw 32 bytes (WebhookRecord.body_sha256).
std::string Sha256Bytes(std::string_view data) {
  auto d = relay::Sha256(data);
  return std::string(reinterpret_cast<const char*>(d.data()), d.size());
}

// SQL of a file under deploy/clickhouse without its comment lines.
std::string SqlFile(const std::string& rel) {
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
  explicit StatsStack(const std::string& name, bool dead_letter_topics = true)
      : dir_(Env("RELAY_IT_DIR") + "/stats-" + name + "-" + Unique()),
        prefix_("it" + Unique() + "."),
        database_("it_" + name + "_" + Unique()),
        clickhouse_dir_(Env("RELAY_IT_CLICKHOUSE_DIR")),
        url_(Trim(ReadFile(clickhouse_dir_ + "/url"))) {
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
    client_ = std::move(*clickhouse::Client::New(co));
  }
  ~StatsStack() {
    procs_.clear();
    clickhouse::ClientOptions co;
    co.url = url_;
    if (auto c = clickhouse::Client::New(co); c.ok()) (void)(*c)->Query("DROP DATABASE IF EXISTS " + database_);
  }

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
    while (std::chrono::steady_clock::now() < deadline) {
      if (HttpClient("127.0.0.1", port).Get("/readyz").status == 200) return port;
      std::this_thread::sleep_for(100ms);
    }
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
  std::string dir_, prefix_, database_, clickhouse_dir_, url_;
  std::unique_ptr<kafka::Producer> producer_;
  std::unique_ptr<clickhouse::Client> client_;
  std::map<int, std::unique_ptr<Subprocess>> procs_;
};

// --- records as the other services write them --------------------------------

std::string JsonString(const json::value& v, std::initializer_list<const char*> path) {
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
  std::string repo;  // one downstream repo, for per-repo queries
};

// Every corpus payload as intake records it, and a small CI history: for
// each of `deliveries` upstream deliveries (in pairs sharing a head sha),
// a dispatch to each downstream repo, its GitHub outcome, the job's two
// result versions and a test report in two batches.
Traffic MakeTraffic(const std::string& tag, int deliveries) {
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

void ProduceTraffic(StatsStack& s, const Traffic& t) {
  s.Produce("github.webhooks", t.webhooks);
  s.Produce("relay.dispatches", t.dispatches);
  s.Produce("github.outcomes", t.outcomes);
  s.Produce("ci.results", t.results);
  s.Produce("ci.test_reports", t.reports);
  s.Produce("cluster.events", t.clusters);
}

// Every table holds exactly what the traffic carries, after FINAL.
void ExpectTables(StatsStack& s, const Traffic& t) {
  EXPECT_EQ(s.WaitCount("SELECT count() FROM webhook_deliveries FINAL", t.webhook_count), t.webhook_count);
  EXPECT_EQ(s.WaitCount("SELECT count() FROM workflow_job FINAL", t.workflow_jobs), t.workflow_jobs);
  EXPECT_EQ(s.WaitCount("SELECT count() FROM workflow_run FINAL", t.workflow_runs), t.workflow_runs);
  EXPECT_EQ(s.WaitCount("SELECT count() FROM dispatches FINAL", t.jobs), t.jobs);
  EXPECT_EQ(s.WaitCount("SELECT count() FROM github_outcomes FINAL", t.jobs), t.jobs);
  EXPECT_EQ(s.WaitCount("SELECT count() FROM crcr_workflow_job FINAL", t.jobs), t.jobs);
  EXPECT_EQ(s.WaitCount("SELECT count() FROM test_results FINAL", t.test_rows), t.test_rows);
  EXPECT_EQ(s.WaitCount("SELECT count() FROM cluster_events FINAL", 4), 4);
}

TEST(StatsIt, MigrationsAppliedTwiceChangeNothing) {
  StatsStack s("migrate");
  std::string out;
  ASSERT_EQ(s.Command("migrate --to 1", &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("applied 0001_tables.sql"));
  EXPECT_THAT(out, ::testing::Not(HasSubstr("0002")));
  ASSERT_EQ(s.Command("migrate", &out), 0);
  EXPECT_THAT(out, HasSubstr("applied 0002_rollups.sql"));
  // The HUD's views need a current server: skipped on 18.16, and said so.
  EXPECT_THAT(out, HasSubstr("skipped 0004_hud.sql: needs ClickHouse >= 23.3, the server is 18.16"));
  std::string schema_sql =
      "SELECT table, name, type, default_kind, default_expression FROM system.columns "
      "WHERE database = currentDatabase() ORDER BY table, name";
  std::string schema = s.Query(schema_sql);
  std::string ledger = s.Query("SELECT version, name, checksum FROM schema_migrations FINAL ORDER BY version");
  ASSERT_EQ(s.Command("migrate", &out), 0);
  EXPECT_THAT(out, HasSubstr("nothing to apply"));
  EXPECT_EQ(s.Query(schema_sql), schema);
  EXPECT_EQ(s.Query("SELECT version, name, checksum FROM schema_migrations FINAL ORDER BY version"), ledger);
  int64_t files = 0;
  for (const auto& f : std::filesystem::directory_iterator(Env("RELAY_ROOT") + "/deploy/clickhouse/migrations")) {
    files += f.path().extension() == ".sql";
  }
  EXPECT_EQ(s.Count("SELECT count() FROM schema_migrations FINAL"), files);
  // Going back is refused; a migration edited after it was applied is found.
  EXPECT_NE(s.Command("migrate --to 1", &out), 0);
  s.Query("INSERT INTO schema_migrations SELECT 1, '0001_tables.sql', 'edited', now() + 10");
  EXPECT_NE(s.Command("migrate", &out), 0);
}

TEST(StatsIt, FillsEveryTableAndAReplayChangesNoQueryResult) {
  StatsStack s("replay");
  s.Migrate();
  Traffic t = MakeTraffic("rp" + Unique(), 24);
  ASSERT_GT(t.workflow_jobs, 0);
  ASSERT_GT(t.workflow_runs, 0);
  ProduceTraffic(s, t);
  // Superseded snapshots are pruned every second here (10 min by default).
  std::map<std::string, std::string> prune_fast = {{"RELAY_STATS_SNAPSHOT_PRUNE_INTERVAL", "1s"}};
  uint16_t port = s.Start(1, prune_fast);
  ASSERT_NE(port, 0) << ReadFile(s.Log(1));
  ExpectTables(s, t);

  // Rows as the sources say: a real workflow_job payload's job, completed
  // (its completed payload outranks earlier ones whatever the order), with
  // labels and steps; job results at their last version; per-test rows.
  EXPECT_EQ(s.Query("SELECT status FROM workflow_job FINAL WHERE id = " + std::to_string(t.completed_job_id)),
            "completed");
  EXPECT_GT(s.Count("SELECT count() FROM workflow_job FINAL WHERE length(labels) > 0 AND length(steps.name) > 0"), 0);
  EXPECT_EQ(s.Count("SELECT count() FROM crcr_workflow_job FINAL WHERE status != 'completed'"), 0);
  EXPECT_EQ(s.Count("SELECT count() FROM crcr_workflow_job FINAL WHERE isNull(execution_time)"), 0);
  EXPECT_EQ(s.Count("SELECT count() FROM webhook_deliveries FINAL WHERE length(payload) < 2"), 0);
  EXPECT_EQ(s.Query("SELECT max(downstream_repo_level) FROM crcr_workflow_job FINAL"), "4");
  ASSERT_TRUE(s.RollupsSettled());
  // The flaky test was found through the dispatches' shas.
  EXPECT_GT(s.Count("SELECT sum(flaky_shas) FROM test_daily FINAL WHERE name = 'test_flaky'"), 0);
  EXPECT_GT(s.Count("SELECT sum(rerun_passed) FROM test_daily FINAL WHERE name = 'test_1'"), 0);

  auto before = s.RunAllQueries(t.repo);
  EXPECT_THAT(before["pass_rate"], HasSubstr(t.repo));
  EXPECT_THAT(before["flaky_tests"], HasSubstr("test_flaky"));
  EXPECT_THAT(before["cluster_usage"], HasSubstr("ml"));
  EXPECT_THAT(before["tier-report"], HasSubstr(t.repo));

  // A full replay: a second instance in a new group reads every topic from
  // the start and inserts every row again.
  auto snapshot_rows = [&] {
    return s.Count("SELECT count() FROM test_slowest_daily") + s.Count("SELECT count() FROM test_flaky_daily");
  };
  auto latest_rows = [&] {
    int64_t n = 0;
    for (const char* table : {"test_slowest_daily", "test_flaky_daily"}) {
      n += s.Count(std::string("SELECT count() FROM ") + table + " WHERE (repo, day, computed_at_ms) IN (SELECT repo, "
                   "day, max(computed_at_ms) FROM " + table + " GROUP BY repo, day)");
    }
    return n;
  };
  ASSERT_TRUE(testing::WaitFor([&] { return snapshot_rows() == latest_rows(); }, 60s));
  int64_t snapshots_before = snapshot_rows();
  ASSERT_GT(snapshots_before, 0);

  uint16_t replay = s.Start(2, prune_fast);
  ASSERT_NE(replay, 0) << ReadFile(s.Log(2));
  auto deadline = std::chrono::steady_clock::now() + 90s;
  while (std::chrono::steady_clock::now() < deadline &&
         testing::MetricValue(replay, "relay_stats_rows_inserted_total{table=\"test_results\"}") < t.test_rows) {
    std::this_thread::sleep_for(200ms);
  }
  EXPECT_EQ(testing::MetricValue(replay, "relay_stats_rows_inserted_total{table=\"test_results\"}"), t.test_rows);
  EXPECT_EQ(testing::MetricValue(replay, "relay_stats_rows_inserted_total{table=\"crcr_workflow_job\"}"), 2 * t.jobs);
  ExpectTables(s, t);
  ASSERT_TRUE(s.RollupsSettled());
  auto after = s.RunAllQueries(t.repo);
  ASSERT_EQ(after.size(), before.size());
  for (const auto& [name, result] : before) EXPECT_EQ(after[name], result) << name;
  // The replay recomputed every window: the superseded snapshots go, so
  // the tables hold what they held before, not a second copy (issue 15).
  EXPECT_TRUE(testing::WaitFor([&] { return snapshot_rows() == latest_rows(); }, 60s))
      << snapshot_rows() << " snapshot rows, " << latest_rows() << " of the latest computations";
  EXPECT_EQ(snapshot_rows(), snapshots_before);
  EXPECT_GE(testing::MetricValue(port, "relay_stats_snapshot_prunes_total") +
                testing::MetricValue(replay, "relay_stats_snapshot_prunes_total"),
            2);
}

// Issue 15, item 8: a test report uploaded again after UTC midnight (a
// retry after a 503) is the same rows, not a second set: its rows are
// placed by the report's stable time, not the upload's wall clock.
TEST(StatsIt, ATestReportUploadedAgainAfterMidnightLandsOnce) {
  StatsStack s("midnight");
  s.Migrate();
  int64_t day_ms = 86'400'000, today = NowMs() / day_ms * day_ms;
  auto upload = [&](int64_t uploaded_at) {
    v1::TestReportBatch b;
    b.set_upload_id("midnight-upload");
    b.set_job_id("midnight-job");
    b.set_repo("midnight/accel");
    b.set_uploaded_at_unix_ms(uploaded_at);
    b.set_report_time_unix_ms(today - 60'000);  // the dispatch, a minute before midnight
    b.set_batches(1);
    b.set_last(true);
    for (int i = 0; i < 5; ++i) {
      auto* c = b.add_cases();
      c->set_file("test_m.py");
      c->set_name("t" + std::to_string(i));
      c->set_duration_s(1);
      c->set_outcome("passed");
    }
    return b.SerializeAsString();
  };
  s.Produce("ci.test_reports", {{"midnight-job", upload(today - 1'000)}});   // 23:59:59
  s.Produce("ci.test_reports", {{"midnight-job", upload(today + 1'000)}});   // 00:00:01, the retry
  ASSERT_NE(s.Start(1), 0) << ReadFile(s.Log(1));
  EXPECT_EQ(s.WaitCount("SELECT count() FROM test_results WHERE upload_id = 'midnight-upload'", 10), 10);
  EXPECT_EQ(s.Count("SELECT count() FROM test_results FINAL WHERE upload_id = 'midnight-upload'"), 5);
  EXPECT_EQ(s.Count("SELECT uniqExact(day) FROM test_results WHERE upload_id = 'midnight-upload'"), 1);
}

TEST(StatsIt, ClickHouseStoppedMidIngestionLosesAndDuplicatesNothing) {
  StatsStack s("chdown");
  s.Migrate();
  uint16_t port = s.Start(1, {{"RELAY_CLICKHOUSE_TIMEOUT", "5s"}});
  ASSERT_NE(port, 0) << ReadFile(s.Log(1));
  auto wave = [&](int first, int count) {
    std::vector<std::pair<std::string, std::string>> records;
    for (int u = first; u < first + count; ++u) {
      v1::TestReportBatch b;
      b.set_upload_id("up" + std::to_string(u));
      b.set_job_id("job" + std::to_string(u));
      b.set_repo("chdown/accel");
      b.set_uploaded_at_unix_ms(NowMs());
      for (int c = 0; c < 1000; ++c) {
        auto* tc = b.add_cases();
        tc->set_file("test_" + std::to_string(c % 20) + ".py");
        tc->set_name("t" + std::to_string(c));
        tc->set_duration_s(0.5);
        tc->set_outcome("passed");
      }
      records.emplace_back(b.job_id(), b.SerializeAsString());
    }
    s.Produce("ci.test_reports", std::move(records));
  };
  wave(0, 100);
  // Some landed; then ClickHouse goes away while more records come.
  ASSERT_GT(s.WaitCount("SELECT least(count(), 1) FROM test_results", 1), 0);
  ASSERT_EQ(testing::RunCommand(Env("RELAY_ROOT") + "/tools/clickhouse/clickhouse-dev stop " + s.clickhouse_dir()), 0);
  wave(100, 100);
  auto deadline = std::chrono::steady_clock::now() + 30s;
  while (std::chrono::steady_clock::now() < deadline && HttpClient("127.0.0.1", port).Get("/readyz").status == 200) {
    std::this_thread::sleep_for(200ms);
  }
  HttpClient probe("127.0.0.1", port);
  auto ready = probe.Get("/readyz");
  EXPECT_EQ(ready.status, 503);
  EXPECT_THAT(ready.body, HasSubstr("clickhouse"));
  std::this_thread::sleep_for(3s);  // inserts fail and back off meanwhile
  ASSERT_EQ(testing::RunCommand(Env("RELAY_ROOT") + "/tools/clickhouse/clickhouse-dev start " + s.clickhouse_dir()), 0);
  EXPECT_EQ(s.WaitCount("SELECT count() FROM test_results FINAL", 200'000, 120s), 200'000);
  EXPECT_EQ(s.Count("SELECT uniqExact(upload_id, seq, idx) FROM test_results"), 200'000);
  EXPECT_GT(testing::MetricValue(port, "relay_stats_clickhouse_errors_total{code=\"UNAVAILABLE\",op=\"insert\"}"), 0);
  deadline = std::chrono::steady_clock::now() + 15s;  // readiness is re-checked every 5 s
  while (std::chrono::steady_clock::now() < deadline && HttpClient("127.0.0.1", port).Get("/readyz").status != 200) {
    std::this_thread::sleep_for(200ms);
  }
  EXPECT_EQ(HttpClient("127.0.0.1", port).Get("/readyz").status, 200);
}

TEST(StatsIt, PoisonRecordsGoToTheDeadLetterTopicAndTheRestLands) {
  StatsStack s("poison");
  s.Migrate();
  Traffic t = MakeTraffic("ps" + Unique(), 2);
  s.Produce("ci.results", {{"bad-1", "\xff\xfe not a protobuf"}});
  v1::JobResult nameless;
  nameless.set_version(1);
  s.Produce("ci.results", {{"bad-2", nameless.SerializeAsString()}});
  s.Produce("ci.results", t.results);
  v1::TestReportBatch odd;
  odd.set_upload_id("odd");
  odd.set_repo("o/r");
  odd.set_uploaded_at_unix_ms(NowMs());
  odd.add_cases()->set_outcome("exploded");
  s.Produce("ci.test_reports", {{"bad-3", odd.SerializeAsString()}});
  s.Produce("ci.test_reports", t.reports);
  ASSERT_NE(s.Start(1), 0) << ReadFile(s.Log(1));
  EXPECT_EQ(s.WaitCount("SELECT count() FROM crcr_workflow_job FINAL", t.jobs), t.jobs);
  EXPECT_EQ(s.WaitCount("SELECT count() FROM test_results FINAL", t.test_rows), t.test_rows);
  std::string error;
  std::vector<kafka::ConsumedRecord> dead;
  for (auto until = std::chrono::steady_clock::now() + 30s; dead.size() < 2 && std::chrono::steady_clock::now() < until;) {
    dead = testing::ReadTopic(testing::FixtureBootstrap(), s.Topic("ci.results") + ".dlq", 10s, &error);
    if (dead.size() < 2) std::this_thread::sleep_for(200ms);
  }
  ASSERT_EQ(dead.size(), 2u) << error;
  std::set<std::string> reasons;
  for (const auto& r : dead) reasons.insert(r.FindHeader(kafka::kDlqReasonHeader) ? *r.FindHeader(kafka::kDlqReasonHeader) : "");
  EXPECT_THAT(reasons, ::testing::Contains(HasSubstr("not a relay.v1.JobResult")));
  EXPECT_THAT(reasons, ::testing::Contains(HasSubstr("without job id")));
  // Dead letters are written once their batch's rows landed: wait for them.
  std::vector<kafka::ConsumedRecord> dead_reports;
  auto deadline = std::chrono::steady_clock::now() + 30s;
  while (dead_reports.empty() && std::chrono::steady_clock::now() < deadline) {
    dead_reports = testing::ReadTopic(testing::FixtureBootstrap(), s.Topic("ci.test_reports") + ".dlq", 10s, &error);
    if (dead_reports.empty()) std::this_thread::sleep_for(200ms);
  }
  ASSERT_EQ(dead_reports.size(), 1u) << error;
  EXPECT_THAT(*dead_reports[0].FindHeader(kafka::kDlqReasonHeader), HasSubstr("unknown outcome \"exploded\""));
}

// Issue 15, item 5: a consumer loop that ends (here: a poison record whose
// dead-letter topic does not exist, so it can be neither dead-lettered nor
// skipped) must not leave a process that looks alive and takes requests: it
// logs why, fails /healthz, drains and exits 1 for its orchestrator to
// restart it. Nothing of the record is committed.
TEST(StatsIt, AConsumerThatStopsForGoodTakesTheProcessDownWithExitCode1) {
  StatsStack s("fatal", /*dead_letter_topics=*/false);
  s.Migrate();
  s.Produce("ci.results", {{"bad-1", "\xff\xfe not a protobuf"}});
  s.Start(1);
  EXPECT_EQ(s.proc(1).Wait(90s), 1) << ReadFile(s.Log(1));
  std::string log = ReadFile(s.Log(1));
  EXPECT_THAT(log, HasSubstr("a part of the service stopped for good"));
  EXPECT_THAT(log, HasSubstr("neither dead-lettered nor skipped"));
}

// --- the published CI files ---------------------------------------------------

// An `issues` webhook as intake records it: `repo`'s issue `number`, filed
// by an author with `association`.
std::pair<std::string, std::string> IssueWebhook(const std::string& delivery, const std::string& repo, int number,
                                                 const std::string& association, const std::string& title,
                                                 const std::string& body, int64_t age_ms = 60'000) {
  json::object issue{{"number", number},
                     {"state", "open"},
                     {"title", title},
                     {"body", body},
                     {"author_association", association},
                     {"user", json::object{{"login", "user-" + delivery}, {"id", 7000 + number}, {"type", "User"}}},
                     {"html_url", "https://github.com/" + repo + "/issues/" + std::to_string(number)}};
  std::string payload = json::serialize(json::object{
      {"action", "opened"},
      {"issue", issue},
      {"repository", json::object{{"full_name", repo}, {"id", 1}}},
      {"sender", json::object{{"login", "user-" + delivery}}}});
  v1::WebhookRecord w;
  w.set_delivery_id(delivery);
  w.set_event("issues");
  w.set_action("opened");
  w.set_repository(repo);
  w.set_received_at_unix_ms(NowMs() - age_ms);
  w.set_body(payload);
  w.set_content_type("application/json");
  w.set_body_sha256(Sha256Bytes(payload));
  return {repo, w.SerializeAsString()};
}

// issue 27: two signed `issues` webhooks, one on another repository and one
// on the upstream by an author with association NONE, both disabled a test
// in every CI job within a refresh. Only the upstream's issues by trusted
// authors may, and an untrusted issue without a Platforms: line must not
// widen a trusted one's disable to every platform. Deliveries older than
// stats.ci_disabled_days are not read.
TEST(StatsIt, DisabledTestsComeOnlyFromTrustedAuthorsOfTheUpstream) {
  StatsStack s("disabled");
  s.Migrate();
  const std::string up = "Up-Org/torch", tag = "dis-" + Unique();
  s.Produce("github.webhooks",
            {IssueWebhook(tag + "-1", "evil-org/x", 1, "MEMBER", "DISABLED test_other_repo (__main__.TestX)", ""),
             IssueWebhook(tag + "-2", "evil-org/x", 2, "NONE", "DISABLED test_other_repo_none (__main__.TestX)", ""),
             IssueWebhook(tag + "-3", up, 3, "NONE", "DISABLED test_stranger (__main__.TestX)", ""),
             IssueWebhook(tag + "-4", up, 4, "MEMBER", "DISABLED test_member (__main__.TestX)",
                          "Platforms: linux\n\nflaky"),
             IssueWebhook(tag + "-5", up, 5, "NONE", "DISABLED test_member (__main__.TestX)", "no platforms line"),
             IssueWebhook(tag + "-6", up, 6, "MEMBER", "DISABLED test_long_ago (__main__.TestX)", "",
                          31LL * 86'400'000)});
  uint16_t port = s.Start(1, {{"RELAY_STATS_CI_FILES_UPSTREAMS", "up-org/torch"},
                              {"RELAY_STATS_CI_DISABLED_DAYS", "30"},
                              {"RELAY_STATS_CI_FILES_INTERVAL", "1s"}});
  ASSERT_NE(port, 0) << ReadFile(s.Log(1));
  ASSERT_EQ(s.WaitCount("SELECT count() FROM webhook_deliveries WHERE event = 'issues'", 6), 6);
  // A refresh that started after the last row landed.
  auto deadline = std::chrono::steady_clock::now() + 60s;
  while (std::chrono::steady_clock::now() < deadline &&
         testing::MetricValue(port, "relay_stats_ci_disabled_issues{verdict=\"untrusted_author\"}") != 2) {
    std::this_thread::sleep_for(200ms);
  }
  auto got = HttpClient("127.0.0.1", port).Get("/ci/disabled-tests-condensed.json");
  ASSERT_EQ(got.status, 200) << got.body;
  EXPECT_EQ(json::parse(got.body), json::parse(R"j({"test_member (__main__.TestX)":
      ["4", "https://github.com/Up-Org/torch/issues/4", ["linux"]]})j"));
  EXPECT_EQ(testing::MetricValue(port, "relay_stats_ci_disabled_issues{verdict=\"other_repository\"}"), 0)
      << "the SQL reads only the upstreams' deliveries";
  EXPECT_EQ(testing::MetricValue(port, "relay_stats_ci_disabled_issues{verdict=\"disabled\"}"), 1);
  EXPECT_GE(testing::MetricValue(
                port, "relay_stats_ci_file_refreshes_total{file=\"disabled-tests-condensed.json\",result=\"ok\"}"),
            1);
}

// --- the tier report ----------------------------------------------------------

// Seeds one repo's history straight into ClickHouse: `level` dispatches
// since `days_at_level` days ago (L1 before that), and `jobs` completed jobs
// over the last 6 days, each `e2e_s` end to end with `queue_s` queueing,
// of which the first `over_3h` take 4 h, `timeouts` timed out and
// `failures` failed.
struct History {
  std::string repo;
  int level = 2;
  int days_at_level = 40;
  int jobs = 200;
  int e2e_s = 2 * 3600;
  int queue_s = 29 * 60;
  int over_3h = 0, timeouts = 0, failures = 0;
};

void Seed(StatsStack& s, const History& h) {
  int64_t now = NowMs() / 1000;
  std::string rows;
  auto dispatch = [&](const std::string& id, int level, int64_t at) {
    rows += "('" + id + "', '" + h.repo + "', " + std::to_string(level) + ", toDateTime(" + std::to_string(at) + "), " +
            std::to_string(at * 1000) + ", 1),";
  };
  dispatch(h.repo + "-l1", 1, now - (h.days_at_level + 5) * 86400);
  dispatch(h.repo + "-first", h.level, now - h.days_at_level * 86400);
  dispatch(h.repo + "-last", h.level, now - 3600);
  rows.pop_back();
  s.Query("INSERT INTO dispatches (request_id, downstream_repo, level, dispatched_at, dispatched_at_ms, version) VALUES " +
          rows);
  rows.clear();
  for (int i = 0; i < h.jobs; ++i) {
    int e2e = i < h.over_3h ? 4 * 3600 : h.e2e_s;
    int64_t completed = now - 6 * 86400 + static_cast<int64_t>(i) * (5 * 86400 / h.jobs);
    bool timed_out = i >= h.over_3h && i < h.over_3h + h.timeouts;
    bool failed = i >= h.over_3h + h.timeouts && i < h.over_3h + h.timeouts + h.failures;
    std::string conclusion = timed_out ? "timed_out" : failed ? "failure" : "success";
    rows += "('" + h.repo + "-" + std::to_string(i) + "', 'completed', '" + h.repo + "', '" + conclusion + "', " +
            std::to_string(h.queue_s) + ", " + std::to_string(e2e - h.queue_s) + ", toDateTime(" +
            std::to_string(completed - e2e) + "), toDateTime(" + std::to_string(completed) + "), " +
            std::to_string(h.level) + ", 1, " + (failed ? "1" : "0") + "),";
  }
  rows.pop_back();
  s.Query("INSERT INTO crcr_workflow_job (id, status, downstream_repo, conclusion, queue_time, execution_time, "
          "dispatched_at, completed_at, downstream_repo_level, version, failed_tests) VALUES " +
          rows);
}

TEST(StatsIt, TierReportVerdictsJustInsideAndJustOutsideEachThreshold) {
  StatsStack s("tier");
  s.Migrate();
  std::string o = "tier" + Unique() + "/";
  // Just inside every L3 rule: 200 jobs, p50 2 h 59 min, 1 over 3 h
  // (0.5%), mean queue 29 min, 1 timeout (0.5%), 90.0% passing (180: the
  // job over 3 h passed; 1 timeout, 19 failures), 31 days at L2. Each
  // other case moves one figure just outside, keeping the others.
  History inside{o + "inside", 2, 31, 200, 2 * 3600 + 59 * 60, 29 * 60, 1, 1, 19};
  std::vector<std::pair<History, std::string>> cases = {
      {inside, "promote-to-L3"},
      {[&] { History h = inside; h.repo = o + "young"; h.days_at_level = 29; return h; }(), "time_at_l2"},
      {[&] { History h = inside; h.repo = o + "slow"; h.e2e_s = 3 * 3600 + 60; return h; }(), "p50_e2e"},
      {[&] { History h = inside; h.repo = o + "long"; h.over_3h = 2; return h; }(), "over_3h"},
      {[&] { History h = inside; h.repo = o + "queued"; h.queue_s = 31 * 60; return h; }(), "queue"},
      {[&] { History h = inside; h.repo = o + "timeouts"; h.timeouts = 2; h.failures = 18; return h; }(), "timeouts"},
      {[&] { History h = inside; h.repo = o + "red"; h.failures = 20; return h; }(), "pass_rate"},
      {[&] { History h = inside; h.repo = o + "l3-ok"; h.level = 3; return h; }(), "keeps-L3"},
      {[&] { History h = inside; h.repo = o + "l3-red"; h.level = 3; h.failures = 40; return h; }(), "demote-to-L2"},
      {[&] { History h = inside; h.repo = o + "l1"; h.level = 1; return h; }(), "not-eligible"},
  };
  for (const auto& [h, want] : cases) Seed(s, h);
  std::string out;
  ASSERT_EQ(s.Command("tier-report --json", &out), 0) << out;
  json::value report = json::parse(out);
  std::map<std::string, json::object> by_repo;
  for (const auto& r : report.at("repos").as_array()) by_repo[std::string(r.at("repo").as_string())] = r.as_object();
  for (const auto& [h, want] : cases) {
    ASSERT_TRUE(by_repo.count(h.repo)) << h.repo;
    const json::object& r = by_repo[h.repo];
    std::string verdict(r.at("verdict").as_string());
    if (want.find('-') != std::string::npos) {
      EXPECT_EQ(verdict, want) << h.repo << ": " << json::serialize(r);
    } else {
      // One rule just outside: stays at L2, and that rule is named.
      EXPECT_EQ(verdict, "stays-L2") << h.repo;
      EXPECT_THAT(std::string(r.at("reason").as_string()), HasSubstr(want)) << h.repo;
    }
  }
  // The table form names every repo too.
  ASSERT_EQ(s.Command("tier-report", &out), 0);
  for (const auto& [h, want] : cases) EXPECT_THAT(out, HasSubstr(h.repo));
}

}  // namespace
}  // namespace relay
