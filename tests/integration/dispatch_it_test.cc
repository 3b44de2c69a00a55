// relay-dispatch end to end on the real Kafka broker, against the fake
// GitHub (its own process), fed with real @octokit/webhooks-examples
// payloads wrapped as intake wraps them. Each test has its own upstream
// repository name and consumer group, so tests sharing the broker and its
// topics do not see each other's work.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <iostream>
#include <future>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include <boost/json.hpp>

#include "relay/auth/relay_token.h"
#include "relay/github/webhook_signature.h"
#include "relay/kafka/producer.h"
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
constexpr auto WriteFile = testing::WriteFileAtomically;
constexpr auto Metric = testing::MetricValue;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

constexpr char kAppId[] = "29310";
constexpr char kTokenKeys[] = "signing_key: it1\nkeys:\n  it1: dispatch-it-secret-0123456789-0123456789\n";

using Payload = testing::CorpusPayload;
using testing::LoadCorpus;

// The corpus payloads of one event and action (in corpus order).
std::vector<Payload> Find(const std::vector<Payload>& corpus, const std::string& event, const std::string& action) {
  std::vector<Payload> out;
  for (const auto& p : corpus) {
    if (p.event != event) continue;
    boost::system::error_code ec;
    auto v = json::parse(p.body, ec);
    if (ec || !v.is_object()) continue;
    auto* a = v.as_object().if_contains("action");
    std::string got = a && a->is_string() ? std::string(a->as_string()) : "";
    if (got == action) out.push_back(p);
  }
  return out;
}




// The fake GitHub, relay-dispatch's files and processes, and a producer
// that writes github.webhooks records as intake would.
class DispatchStack {
 public:
  explicit DispatchStack(const std::string& name) : dir_(Env("RELAY_IT_DIR") + "/dispatch-" + name + "-" + Unique()) {
    testing::RunCommand("mkdir -p " + dir_);
    upstream_ = "it-" + Unique() + "/upstream";
    group_ = "it-dispatch-" + Unique();
    // The App's key pair.
    auto [private_pem, public_pem] = testing::NewRsaKeyPairPem();
    WriteFile(dir_ + "/app.pem", private_pem);
    WriteFile(dir_ + "/app.pub", public_pem);
    WriteFile(dir_ + "/keys.yaml", kTokenKeys);
    fake_ = std::make_unique<Subprocess>(
        std::vector<std::string>{Env("RELAY_IT_FAKE_GITHUB_BIN"), "--app-id", kAppId, "--public-key", dir_ + "/app.pub",
                                 "--port-file", dir_ + "/github.port", "--record", dir_ + "/calls.jsonl"},
        std::map<std::string, std::string>{}, dir_ + "/github.log");
    EXPECT_TRUE(testing::WaitForFile(dir_ + "/github.port", 10s));
    github_port_ = static_cast<uint16_t>(std::stoi(ReadFile(dir_ + "/github.port")));
    kafka::ProducerOptions po;
    po.bootstrap = testing::FixtureBootstrap();
    producer_ = std::move(*kafka::NewKafkaProducer(po, nullptr));
  }

  void SetAllowlist(const std::string& yaml) { WriteFile(dir_ + "/allowlist.yaml", yaml); }

  // Starts relay-dispatch #n; returns its HTTP port (0 on failure).
  uint16_t StartDispatch(int n, std::map<std::string, std::string> env = {}) {
    std::string port_file = dir_ + "/dispatch" + std::to_string(n) + ".port";
    std::remove(port_file.c_str());
    env.emplace("RELAY_HTTP_LISTEN", "127.0.0.1:0");
    env.emplace("RELAY_HTTP_DRAIN_DELAY", "0s");
    env.emplace("RELAY_KAFKA_BOOTSTRAP", testing::FixtureBootstrap());
    env.emplace("RELAY_KAFKA_GROUP_ID", group_);
    env.emplace("RELAY_GITHUB_API_URL", "http://127.0.0.1:" + std::to_string(github_port_));
    env.emplace("RELAY_GITHUB_APP_ID", kAppId);
    env.emplace("RELAY_GITHUB_PRIVATE_KEY_FILE", dir_ + "/app.pem");
    env.emplace("RELAY_GITHUB_MAX_WRITES_PER_MINUTE", "1000000");
    env.emplace("RELAY_GITHUB_MAX_WRITES_PER_HOUR", "100000000");
    env.emplace("RELAY_ALLOWLIST_FILE", dir_ + "/allowlist.yaml");
    env.emplace("RELAY_ALLOWLIST_RELOAD_INTERVAL", "200ms");
    env.emplace("RELAY_TOKENS_KEYS_FILE", dir_ + "/keys.yaml");
    env.emplace("RELAY_DISPATCH_UPSTREAM_REPO", upstream_);
    env.emplace("RELAY_DISPATCH_BATCH_WAIT", "1s");
    dispatch_[n] = std::make_unique<Subprocess>(
        std::vector<std::string>{Env("RELAY_IT_DISPATCH_BIN"), "--port-file", port_file}, env,
        dir_ + "/dispatch" + std::to_string(n) + ".log");
    if (!testing::WaitForFile(port_file, 30s)) return 0;
    return static_cast<uint16_t>(std::stoi(ReadFile(port_file)));
  }
  Subprocess& dispatch(int n) { return *dispatch_.at(n); }
  std::string Log(int n) { return ReadFile(dir_ + "/dispatch" + std::to_string(n) + ".log"); }

  // A webhook record as intake makes it, for this stack's upstream.
  void Produce(const Payload& p, const std::string& delivery) {
    v1::WebhookRecord r;
    r.set_delivery_id(delivery);
    r.set_event(p.event);
    boost::system::error_code ec;
    auto v = json::parse(p.body, ec);
    if (!ec && v.is_object()) {
      if (auto* a = v.as_object().if_contains("action"); a && a->is_string()) r.set_action(std::string(a->as_string()));
    }
    r.set_repository(upstream_);
    r.set_body(p.body);
    auto digest = github::Sha256(p.body);
    r.set_body_sha256(digest.data(), digest.size());
    r.set_content_type("application/json");
    r.set_received_at_unix_ms(1);
    auto acked = std::make_shared<std::promise<absl::Status>>();
    pending_.push_back(acked->get_future());
    producer_->Send(kafka::Record{"github.webhooks", upstream_, r.SerializeAsString(),
                                  {{"relay-schema", "relay.v1.WebhookRecord"}, {"relay-delivery-id", delivery}}},
                    [acked](absl::Status s) { acked->set_value(std::move(s)); });
  }
  void ProduceKeyed(const std::string& topic, const std::string& key, const std::string& value) {
    auto acked = std::make_shared<std::promise<absl::Status>>();
    pending_.push_back(acked->get_future());
    producer_->Send(kafka::Record{topic, key, value, {}}, [acked](absl::Status s) { acked->set_value(std::move(s)); });
  }
  void ProduceRaw(const std::string& topic, const std::string& value) {
    auto acked = std::make_shared<std::promise<absl::Status>>();
    pending_.push_back(acked->get_future());
    v1::GitHubRequest r;
    std::string delivery = r.ParseFromString(value) ? r.delivery_id() : "";
    producer_->Send(kafka::Record{topic, upstream_, value, {{"relay-delivery-id", delivery}}},
                    [acked](absl::Status s) { acked->set_value(std::move(s)); });
  }
  void Flush() {
    for (auto& f : pending_) ASSERT_TRUE(f.get().ok());
    pending_.clear();
  }

  json::value Fake(const std::string& method, const std::string& path, const std::string& body = "") {
    HttpClient client("127.0.0.1", github_port_);
    auto r = method == "GET" ? client.Get(path) : client.Post(path, {{"Content-Type", "application/json"}}, body);
    boost::system::error_code ec;
    return json::parse(r.body, ec);
  }
  // Successful dispatch calls the fake recorded: (repo, body).
  std::vector<json::object> Dispatches() {
    std::vector<json::object> out;
    json::value calls = Fake("GET", "/_fake/calls");
    for (auto& c : calls.as_array()) {
      auto& o = c.as_object();
      if (o.at("endpoint").as_string() == "POST /repos/{owner}/{repo}/dispatches" && o.at("status").as_int64() == 204) {
        out.push_back(o);
      }
    }
    return out;
  }
  // Waits until at least `n` dispatches were received (and nothing arrives
  // for `settle`), or `timeout`.
  size_t WaitForDispatches(size_t n, std::chrono::milliseconds timeout, std::chrono::milliseconds settle = 1500ms) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    size_t last = 0;
    auto since = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() < deadline) {
      size_t now = static_cast<size_t>(Fake("GET", "/_fake/stats").at("dispatches").as_int64());
      if (now != last) {
        last = now;
        since = std::chrono::steady_clock::now();
      } else if (now >= n && std::chrono::steady_clock::now() - since >= settle) {
        break;
      }
      std::this_thread::sleep_for(100ms);
    }
    return last;
  }

  const std::string& upstream() const { return upstream_; }
  const std::string& dir() const { return dir_; }
  std::string group() const { return group_; }
  void set_group(std::string g) { group_ = std::move(g); }

 private:
  std::string dir_, upstream_, group_;
  uint16_t github_port_ = 0;
  std::unique_ptr<Subprocess> fake_;
  std::map<int, std::unique_ptr<Subprocess>> dispatch_;
  std::unique_ptr<kafka::Producer> producer_;
  std::vector<std::future<absl::Status>> pending_;
};

constexpr char kFourLevels[] = R"(
L1: [it-org/l1]
L2: [it-org/l2]
L3:
  xpu:
    it-org/l3: [oncall]
L4:
  - it-org/l4: "oncall"
)";

// Records of `topic` whose relay-delivery-id starts with `prefix`.
std::vector<kafka::ConsumedRecord> TopicRecords(const std::string& topic, const std::string& prefix) {
  std::string error;
  auto all = testing::ReadTopic(testing::FixtureBootstrap(), topic, 60s, &error);
  EXPECT_TRUE(error.empty()) << error;
  std::vector<kafka::ConsumedRecord> out;
  for (auto& r : all) {
    const std::string* d = r.FindHeader("relay-delivery-id");
    if (d && d->rfind(prefix, 0) == 0) out.push_back(std::move(r));
  }
  return out;
}

class DispatchIT : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(Env("RELAY_IT_KAFKA_DIR").empty()) << "run through ctest (fixtures start the broker)";
    testing::RunCommand(Env("RELAY_ROOT") + "/tools/kafka/kafka-dev restart " + Env("RELAY_IT_KAFKA_DIR") + " >/dev/null 2>&1");
    corpus_ = LoadCorpus();
    ASSERT_GE(corpus_.size(), 300u);
  }
  std::vector<Payload> corpus_;
};

TEST_F(DispatchIT, RealPayloadsMakeExactlyTheExpectedCallsForEveryLevel) {
  DispatchStack stack("calls");
  stack.SetAllowlist(kFourLevels);
  ASSERT_NE(stack.StartDispatch(1), 0) << stack.Log(1);
  std::string run = "calls-" + Unique() + "-";
  // Relevant: opened, synchronize, closed, push. Ignored: an issue, a
  // labelled PR without a ciflow/crcr label, an edited PR.
  auto opened = Find(corpus_, "pull_request", "opened").at(0);
  auto sync = Find(corpus_, "pull_request", "synchronize").at(0);
  auto closed = Find(corpus_, "pull_request", "closed").at(0);
  Payload push;
  for (const auto& p : Find(corpus_, "push", "")) {
    if (p.body.find("\"deleted\": true") == std::string::npos && p.body.find("\"deleted\":true") == std::string::npos) {
      push = p;
      break;
    }
  }
  ASSERT_FALSE(push.body.empty());
  stack.Produce(opened, run + "opened");
  stack.Produce(sync, run + "sync");
  stack.Produce(closed, run + "closed");
  stack.Produce(push, run + "push");
  stack.Produce(Find(corpus_, "issues", "opened").at(0), run + "issue");
  stack.Produce(Find(corpus_, "pull_request", "labeled").at(0), run + "labeled");
  // A labelled PR with a ciflow/crcr label: the same real payload, label renamed.
  Payload crcr = Find(corpus_, "pull_request", "labeled").at(0);
  json::value doc = json::parse(crcr.body);
  std::string old_label(doc.at("label").at("name").as_string());
  doc.as_object()["label"].as_object()["name"] = "ciflow/crcr/xpu";
  for (auto& l : doc.as_object()["pull_request"].as_object()["labels"].as_array()) {
    if (l.at("name").as_string() == old_label) l.as_object()["name"] = "ciflow/crcr/xpu";
  }
  stack.Produce({"pull_request", json::serialize(doc), ""}, run + "crcr");
  // check_run rerequested: a real one, on a relay check run of this app.
  Payload rerun = Find(corpus_, "check_run", "rerequested").at(0);
  json::value cr = json::parse(rerun.body);
  cr.as_object()["check_run"].as_object()["name"] = "crcr/it-org/l3/ci/build";
  cr.as_object()["check_run"].as_object()["external_id"] = "424242/1/build";
  cr.as_object()["check_run"].as_object()["app"].as_object()["id"] = std::stoll(kAppId);
  stack.Produce({"check_run", json::serialize(cr), ""}, run + "rerun");
  stack.Flush();

  EXPECT_EQ(stack.WaitForDispatches(16, 60s), 16u);
  auto calls = stack.Dispatches();
  std::map<std::string, std::set<std::string>> by_repo;  // repo -> delivery ids
  auto keys = auth::RelayTokenKeys::Parse(kTokenKeys, "it");
  for (const auto& c : calls) {
    const auto& body = c.at("body").as_object();
    const auto& cp = body.at("client_payload").as_object();
    std::string repo(c.at("repo").as_string());
    std::string delivery(cp.at("delivery_id").as_string());
    by_repo[repo].insert(delivery);
    EXPECT_EQ(body.at("event_type").as_string(), cp.at("event_type").as_string());
    EXPECT_LE(cp.size(), 10u);
    auto claims = keys->Verify(std::string(cp.at("relay_token").as_string()), std::time(nullptr));
    ASSERT_TRUE(claims.ok()) << claims.status();
    EXPECT_EQ(claims->repo, repo);
    EXPECT_EQ(claims->delivery_id, delivery);
    // The upstream payload itself, byte for byte as JSON.
    const Payload& src = delivery == run + "opened" ? opened : delivery == run + "sync" ? sync
                         : delivery == run + "closed" ? closed : push;
    EXPECT_EQ(json::serialize(cp.at("payload")), json::serialize(json::parse(src.body))) << delivery;
  }
  std::set<std::string> want = {run + "opened", run + "sync", run + "closed", run + "push"};
  for (const char* repo : {"it-org/l1", "it-org/l2", "it-org/l3", "it-org/l4"}) {
    EXPECT_EQ(by_repo[repo], want) << repo;
  }
  // The re-run, once, on the downstream repo behind the check run.
  int reruns = 0;
  json::value all_calls = stack.Fake("GET", "/_fake/calls");
  for (auto& c : all_calls.as_array()) {
    if (c.at("path").as_string() == "/repos/it-org/l3/actions/runs/424242/rerun-failed-jobs") ++reruns;
  }
  EXPECT_EQ(reruns, 1);
  // Records: a dispatch record per (delivery, repo) with its level, a label
  // fact for the crcr label, an outcome per write.
  auto dispatched = TopicRecords("relay.dispatches", run);
  EXPECT_EQ(dispatched.size(), 16u);
  for (const auto& r : dispatched) {
    v1::DispatchRecord d;
    ASSERT_TRUE(d.ParseFromString(r.value));
    EXPECT_EQ(d.upstream_repo(), stack.upstream());
    EXPECT_EQ(d.level(), d.downstream_repo().back() - '0');
    EXPECT_GT(d.dispatched_at_unix_ms(), 0);
    EXPECT_EQ(d.token_key_id(), "it1");
  }
  // The label fact is state (a compacted topic keyed by PR): a batch that
  // came again may have published it again, the same.
  auto labels = TopicRecords("relay.pr_labels", run);
  ASSERT_GE(labels.size(), 1u);
  for (const auto& l : labels) {
    v1::PullRequestLabels facts;
    ASSERT_TRUE(facts.ParseFromString(l.value));
    EXPECT_EQ(facts.delivery_id(), run + "crcr");
    ASSERT_EQ(facts.crcr_devices_size(), 1);
    EXPECT_EQ(facts.crcr_devices(0), "xpu");
  }
  EXPECT_EQ(TopicRecords("github.outcomes", run).size(), 17u);  // 16 dispatches + 1 re-run
}

TEST_F(DispatchIT, AnOversizePayloadIsSlimmedUnder64KB) {
  DispatchStack stack("slim");
  stack.SetAllowlist("L2: [it-org/big]\n");
  ASSERT_NE(stack.StartDispatch(1), 0) << stack.Log(1);
  Payload opened = Find(corpus_, "pull_request", "opened").at(0);
  json::value doc = json::parse(opened.body);
  doc.as_object()["pull_request"].as_object()["body"] = std::string(200'000, 'x');
  std::string run = "slim-" + Unique();
  stack.Produce({"pull_request", json::serialize(doc), ""}, run);
  stack.Flush();
  ASSERT_EQ(stack.WaitForDispatches(1, 30s), 1u);
  auto call = stack.Dispatches().at(0);
  std::string body = json::serialize(call.at("body"));
  EXPECT_LT(body.size(), 64u * 1024);
  const auto& cp = call.at("body").at("client_payload").as_object();
  EXPECT_TRUE(cp.at("slimmed").as_bool());
  EXPECT_EQ(cp.at("payload").at("pull_request").at("head").at("sha"), doc.at("pull_request").at("head").at("sha"));
  EXPECT_EQ(cp.at("payload").at("number"), doc.at("number"));
  auto records = TopicRecords("relay.dispatches", run);
  ASSERT_EQ(records.size(), 1u);
  v1::DispatchRecord d;
  ASSERT_TRUE(d.ParseFromString(records[0].value));
  EXPECT_TRUE(d.slimmed());
}

TEST_F(DispatchIT, TheAllowlistReloadsWithoutARestartAndABadFileIsRefused) {
  DispatchStack stack("reload");
  stack.SetAllowlist("L1: [it-org/first]\n");
  uint16_t port = stack.StartDispatch(1);
  ASSERT_NE(port, 0) << stack.Log(1);
  Payload push;
  for (const auto& p : Find(corpus_, "push", "")) {
    if (p.body.find("\"deleted\": false") != std::string::npos || p.body.find("\"deleted\":false") != std::string::npos) push = p;
  }
  ASSERT_FALSE(push.body.empty());
  std::string run = "reload-" + Unique() + "-";
  stack.Produce(push, run + "1");
  stack.Flush();
  ASSERT_EQ(stack.WaitForDispatches(1, 30s), 1u);
  auto metric = [&](const std::string& name) { return Metric(port, name); };
  // A new repo at L4: picked up while running.
  stack.SetAllowlist("L1: [it-org/first]\nL4: [it-org/added]\n");
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (metric("relay_allowlist_repos{level=\"L4\"}") != 1 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(50ms);
  }
  stack.Produce(push, run + "2");
  stack.Flush();
  ASSERT_EQ(stack.WaitForDispatches(3, 30s), 3u) << [&] {
    std::string seen;
    for (const auto& c : stack.Dispatches()) seen += json::serialize(c) .substr(0, 300) + "\n";
    return seen;
  }();
  // A bad file (a repo twice) is refused: the last good one stays.
  stack.SetAllowlist("L1: [it-org/first]\nL4: [it-org/first]\n");
  deadline = std::chrono::steady_clock::now() + 10s;
  while (metric("relay_allowlist_reloads_total{result=\"refused\"}") < 1 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_EQ(metric("relay_allowlist_reloads_total{result=\"refused\"}"), 1);
  EXPECT_THAT(stack.Log(1), HasSubstr("allowlist change refused"));
  stack.Produce(push, run + "3");
  stack.Flush();
  ASSERT_EQ(stack.WaitForDispatches(5, 30s), 5u);
  std::map<std::string, int> per_repo;
  std::string seen;
  for (const auto& c : stack.Dispatches()) {
    per_repo[std::string(c.at("repo").as_string())]++;
    seen += std::string(c.at("repo").as_string()) + " " + json::serialize(c.at("body").at("client_payload").at("delivery_id")) + "; ";
  }
  EXPECT_EQ(per_repo["it-org/first"], 3) << seen;
  EXPECT_EQ(per_repo["it-org/added"], 2) << seen;
}

TEST_F(DispatchIT, PermanentFailuresAreDeadLetteredWithTheReasonAndTransientOnesRetried) {
  DispatchStack stack("errors");
  stack.SetAllowlist("L2: [it-org/ok, it-org/gone, it-org/bad, it-org/flaky]\n");
  stack.Fake("POST", "/_fake/config", R"({"not_installed":["it-org/gone"]})");
  stack.Fake("POST", "/_fake/faults", R"({"path":"/repos/it-org/bad/dispatches","status":422,"count":-1,"message":"Invalid request"})");
  stack.Fake("POST", "/_fake/faults", R"({"path":"/repos/it-org/flaky/dispatches","status":502,"count":2})");
  ASSERT_NE(stack.StartDispatch(1), 0) << stack.Log(1);
  std::string run = "errors-" + Unique();
  stack.Produce(Find(corpus_, "pull_request", "opened").at(0), run);
  stack.Flush();
  ASSERT_EQ(stack.WaitForDispatches(2, 60s, 3s), 2u);  // ok, and flaky after two 502s
  auto dead = TopicRecords("github.requests.dlq", run);
  std::map<std::string, std::string> reason;
  for (const auto& r : dead) {
    v1::GitHubRequest req;
    ASSERT_TRUE(req.ParseFromString(r.value));
    reason[req.repo()] = *r.FindHeader("relay-dlq-reason");
  }
  ASSERT_EQ(reason.size(), 2u);
  EXPECT_THAT(reason["it-org/gone"], HasSubstr("not installed"));
  EXPECT_THAT(reason["it-org/bad"], HasSubstr("HTTP 422"));
  int flaky_attempts = 0;
  for (const auto& r : TopicRecords("github.outcomes", run)) {
    v1::GitHubOutcome o;
    ASSERT_TRUE(o.ParseFromString(r.value));
    if (o.repo() == "it-org/flaky") flaky_attempts = o.attempts();
  }
  EXPECT_EQ(flaky_attempts, 3);
}

TEST_F(DispatchIT, NoExamplePayloadCrashesIt) {
  DispatchStack stack("corpus");
  stack.SetAllowlist(kFourLevels);
  uint16_t port = stack.StartDispatch(1);
  ASSERT_NE(port, 0) << stack.Log(1);
  std::string run = "corpus-" + Unique() + "-";
  for (size_t i = 0; i < corpus_.size(); ++i) stack.Produce(corpus_[i], run + std::to_string(i));
  stack.ProduceRaw("github.requests", "not a record at all");
  stack.Flush();
  stack.WaitForDispatches(4, 60s, 3s);
  EXPECT_TRUE(stack.dispatch(1).Running());
  EXPECT_EQ(HttpClient("127.0.0.1", port).Get("/readyz").status, 200);
  std::string m = HttpClient("127.0.0.1", port).Get("/metrics").body;
  EXPECT_THAT(m, HasSubstr("relay_dispatch_events_total{event=\"issues\",outcome=\"ignored\"}"));
}

TEST_F(DispatchIT, RequestsFromOtherServicesAreCarriedOutUnderTheSameBudget) {
  DispatchStack stack("requests");
  stack.SetAllowlist(kFourLevels);
  ASSERT_NE(stack.StartDispatch(1), 0) << stack.Log(1);
  std::string run = "requests-" + Unique() + "-";
  auto request = [&](const std::string& id) {
    v1::GitHubRequest r;
    r.set_id(run + id);
    r.set_repo(stack.upstream());
    r.set_level(3);
    r.set_delivery_id(run + "d");
    return r;
  };
  // A check run in progress, then completed: one check run, updated.
  for (const char* status : {"in_progress", "completed"}) {
    v1::GitHubRequest r = request(std::string("check-") + status);
    auto* c = r.mutable_check_run();
    c->set_name("crcr/it-org/l3/ci/build");
    c->set_head_sha("0123456789abcdef0123456789abcdef01234567");
    c->set_external_id("777/1/build");
    c->set_status(status);
    if (std::string(status) == "completed") c->set_conclusion("success");
    c->set_details_url("https://github.com/it-org/l3/actions/runs/777");
    stack.ProduceRaw("github.requests", r.SerializeAsString());
    stack.Flush();
    // One after the other, as the collector would send them.
    auto deadline = std::chrono::steady_clock::now() + 30s;
    while (TopicRecords("github.outcomes", run).size() < (std::string(status) == "completed" ? 2u : 1u) &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(200ms);
    }
  }
  // A PR comment, twice: found again by its marker, never a second one.
  for (const char* text : {"first", "second"}) {
    v1::GitHubRequest r = request(std::string("comment-") + text);
    r.mutable_comment()->set_issue_number(7);
    r.mutable_comment()->set_marker("<!-- relay:it -->");
    r.mutable_comment()->set_body(std::string("<!-- relay:it -->\n") + text);
    stack.ProduceRaw("github.requests", r.SerializeAsString());
    stack.Flush();
    auto deadline = std::chrono::steady_clock::now() + 30s;
    while (TopicRecords("github.outcomes", run).size() < (std::string(text) == "second" ? 4u : 3u) &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(200ms);
    }
  }
  std::map<std::string, int> endpoints;
  json::value calls = stack.Fake("GET", "/_fake/calls");
  for (auto& c : calls.as_array()) endpoints[std::string(c.at("endpoint").as_string())]++;
  EXPECT_EQ(endpoints["POST /repos/{owner}/{repo}/check-runs"], 1);
  EXPECT_EQ(endpoints["PATCH /repos/{owner}/{repo}/check-runs/{id}"], 1);
  EXPECT_EQ(endpoints["POST /repos/{owner}/{repo}/issues/{id}/comments"], 1);
  EXPECT_EQ(endpoints["PATCH /repos/{owner}/{repo}/issues/comments/{id}"], 1);
  for (const auto& r : TopicRecords("github.outcomes", run)) {
    v1::GitHubOutcome o;
    ASSERT_TRUE(o.ParseFromString(r.value));
    EXPECT_EQ(o.result(), "done") << o.request_id() << " " << o.error();
  }
}

// What the fake recorded of each dispatch call.
struct Call {
  std::string key, repo, delivery;
  int64_t t0 = 0, t1 = 0;
  int status = 0;
};

std::vector<Call> DispatchCalls(DispatchStack& stack) {
  std::vector<Call> out;
  json::value calls = stack.Fake("GET", "/_fake/calls?brief=1");
  for (auto& c : calls.as_array()) {
    const auto& o = c.as_object();
    if (o.at("endpoint").as_string() != "POST /repos/{owner}/{repo}/dispatches") continue;
    Call call;
    call.key = o.contains("idempotency_key") ? std::string(o.at("idempotency_key").as_string()) : "";
    call.repo = std::string(o.at("repo").as_string());
    call.delivery = std::string(o.at("body").at("client_payload").at("delivery_id").as_string());
    call.t0 = o.at("t0").as_int64();
    call.t1 = o.at("t1").as_int64();
    call.status = static_cast<int>(o.at("status").as_int64());
    out.push_back(std::move(call));
  }
  return out;
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}


// When a SIGKILL was sent and when the process was seen dead: a slow
// build (TSan) keeps running for some milliseconds after the signal.
struct KillWindow {
  int64_t sent_ms = 0, dead_ms = 0;
};

// Checks a crash's aftermath: every (delivery, repo) dispatched, and only
// calls in flight at the kill made again, with the same id. A call counts
// as in flight when the fake had started it by the time the process was
// dead (plus `margin`: bytes written just before death are read by the
// fake just after) and answered it no earlier than `margin` before the
// signal (its result may not have been durable yet: the ledger's DONE is
// written after the answer).
void ExpectOnlyInFlightCallsRepeated(const std::vector<Call>& calls, size_t want_pairs, KillWindow kill,
                                     int64_t margin_ms, double relay_repeats) {
  auto in_flight_at_kill = [&](const Call& c) {
    return c.t0 <= kill.dead_ms + margin_ms && c.t1 + margin_ms >= kill.sent_ms;
  };
  std::map<std::string, std::vector<const Call*>> by_key;
  std::set<std::pair<std::string, std::string>> pairs;
  for (const auto& c : calls) {
    if (c.status == 204) pairs.insert({c.delivery, c.repo});
    by_key[c.key].push_back(&c);
  }
  EXPECT_EQ(pairs.size(), want_pairs) << "some (delivery, repo) never dispatched";
  int in_flight = 0;
  for (const auto& c : calls) in_flight += in_flight_at_kill(c);
  int repeats = 0;
  for (const auto& [key, list] : by_key) {
    if (list.size() < 2) continue;
    repeats += static_cast<int>(list.size()) - 1;
    // One id, one (delivery, repo); the earlier call was in flight at the kill.
    for (const Call* c : list) {
      EXPECT_EQ(c->delivery, list[0]->delivery);
      EXPECT_EQ(c->repo, list[0]->repo);
    }
    const Call* first = *std::min_element(list.begin(), list.end(), [](const Call* a, const Call* b) { return a->t0 < b->t0; });
    EXPECT_TRUE(in_flight_at_kill(*first))
        << key << " repeated, but its first call ran from " << first->t0 - kill.sent_ms << " to "
        << first->t1 - kill.sent_ms << " ms after the signal; the process was dead at " << kill.dead_ms - kill.sent_ms;
  }
  EXPECT_LE(repeats, in_flight);
  EXPECT_GE(relay_repeats, repeats) << "the relay counted fewer repeats than the fake saw";
  std::cout << "calls in flight at the kill: " << in_flight << ", repeated: " << repeats
            << ", repeats the relay counted: " << relay_repeats << std::endl;
  ::testing::Test::RecordProperty("in_flight_at_kill", in_flight);
  ::testing::Test::RecordProperty("repeats", repeats);
}

constexpr char kTenRepos[] = "L2: [it-org/r0, it-org/r1, it-org/r2, it-org/r3, it-org/r4, it-org/r5, it-org/r6, it-org/r7, it-org/r8, it-org/r9]\n";

Payload APush(const std::vector<Payload>& corpus) {
  for (const auto& p : Find(corpus, "push", "")) {
    if (p.body.find("\"deleted\": false") != std::string::npos || p.body.find("\"deleted\":false") != std::string::npos) return p;
  }
  return {};
}

TEST_F(DispatchIT, KilledMidFanOutRestartedEverythingDispatchedOnlyInFlightCallsRepeatedReplaySendsNothing) {
  DispatchStack stack("crash");
  stack.SetAllowlist(kTenRepos);
  // 5 ms a call, and a primary limit above the 10,000 calls (GitHub's
  // default 5,000 an hour would hold the rest for an hour, as it should).
  stack.Fake("POST", "/_fake/config", R"({"latency_ms":5,"rate_limit":{"limit":1000000,"window_seconds":3600}})");
  ASSERT_NE(stack.StartDispatch(1), 0) << stack.Log(1);
  Payload push = APush(corpus_);
  ASSERT_FALSE(push.body.empty());
  std::string run = "crash-" + Unique() + "-";
  for (int i = 0; i < 1000; ++i) stack.Produce(push, run + std::to_string(i));
  stack.Flush();
  // SIGKILL about a third of the way through the 10,000 dispatches.
  auto deadline = std::chrono::steady_clock::now() + 120s;
  while (stack.Fake("GET", "/_fake/stats").at("dispatches").as_int64() < 3000 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
  }
  KillWindow kill{NowMs()};
  stack.dispatch(1).Signal(SIGKILL);
  stack.dispatch(1).Wait(10s);
  kill.dead_ms = NowMs();
  int64_t at_kill = stack.Fake("GET", "/_fake/stats").at("dispatches").as_int64();
  ASSERT_GE(at_kill, 3000);
  ASSERT_LT(at_kill, 10000) << "the fan-out finished before the kill";
  uint16_t port = stack.StartDispatch(2);
  ASSERT_NE(port, 0) << stack.Log(2);
  stack.WaitForDispatches(10000, 180s, 3s);
  auto calls = DispatchCalls(stack);
  ExpectOnlyInFlightCallsRepeated(calls, 10000, kill, 250, Metric(port, "relay_dispatch_repeats_total"));

  // An operator replays github.webhooks from the start (a new group reads
  // everything): the ledger says it is all done; nothing new is sent.
  stack.dispatch(2).Signal(SIGTERM);
  EXPECT_EQ(stack.dispatch(2).Wait(60s), 0);
  size_t before = calls.size();
  stack.set_group("it-replay-" + Unique());
  uint16_t replay = stack.StartDispatch(3);
  ASSERT_NE(replay, 0) << stack.Log(3);
  deadline = std::chrono::steady_clock::now() + 120s;
  while (Metric(replay, "relay_dispatch_replays_skipped_total") < 10000 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_GE(Metric(replay, "relay_dispatch_replays_skipped_total"), 10000);
  std::this_thread::sleep_for(1s);
  EXPECT_EQ(DispatchCalls(stack).size(), before) << "the replay sent dispatches again";
}

TEST_F(DispatchIT, TwoInstancesOneKilledTheOtherTakesOverWithoutLossOrRepeatsBeyondInFlight) {
  DispatchStack stack("pair");
  stack.SetAllowlist(kTenRepos);
  // 5 ms a call, and a primary limit above the 10,000 calls (GitHub's
  // default 5,000 an hour would hold the rest for an hour, as it should).
  stack.Fake("POST", "/_fake/config", R"({"latency_ms":5,"rate_limit":{"limit":1000000,"window_seconds":3600}})");
  std::map<std::string, std::string> env = {{"RELAY_KAFKA_SESSION_TIMEOUT", "6s"}};
  uint16_t p1 = stack.StartDispatch(1, env), p2 = stack.StartDispatch(2, env);
  ASSERT_NE(p1, 0) << stack.Log(1);
  ASSERT_NE(p2, 0) << stack.Log(2);
  // Both are members before the work arrives.
  auto deadline = std::chrono::steady_clock::now() + 60s;
  auto assigned = [&](int n) { return stack.Log(n).find("partitions assigned") != std::string::npos; };
  while (!(assigned(1) && assigned(2)) && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(100ms);
  Payload push = APush(corpus_);
  std::string run = "pair-" + Unique() + "-";
  for (int i = 0; i < 500; ++i) stack.Produce(push, run + std::to_string(i));
  stack.Flush();
  while (stack.Fake("GET", "/_fake/stats").at("dispatches").as_int64() < 1500 && std::chrono::steady_clock::now() < deadline + 60s) {
    std::this_thread::sleep_for(20ms);
  }
  // The records share a key, so one member owns their partition: kill that one.
  int owner = Metric(p1, "relay_dispatch_dispatches_total{level=\"L2\"}") > 0 ? 1 : 2;
  KillWindow kill{NowMs()};
  stack.dispatch(owner).Signal(SIGKILL);
  stack.dispatch(owner).Wait(10s);
  kill.dead_ms = NowMs();
  ASSERT_LT(stack.Fake("GET", "/_fake/stats").at("dispatches").as_int64(), 5000) << "finished before the kill";
  uint16_t survivor = owner == 1 ? p2 : p1;
  stack.WaitForDispatches(5000, 180s, 3s);
  ExpectOnlyInFlightCallsRepeated(DispatchCalls(stack), 5000, kill, 250,
                                  Metric(survivor, "relay_dispatch_repeats_total"));
}

TEST_F(DispatchIT, TheBudgetHoldsUnderTenTimesTheLoadAndL4GoesFirst) {
  DispatchStack stack("budget");
  stack.SetAllowlist("L1: [it-org/a1, it-org/a2, it-org/a3, it-org/a4, it-org/a5]\n"
                     "L4: [it-org/z1, it-org/z2, it-org/z3, it-org/z4, it-org/z5]\n");
  // GitHub's side: 20 writes a second, 70 calls an installation per 3 s.
  stack.Fake("POST", "/_fake/config", R"({"content_limit":{"per_window":20,"window_seconds":1},"rate_limit":{"limit":70,"window_seconds":3}})");
  // Three secondary-limit answers on the way, each asking for a second.
  stack.Fake("POST", "/_fake/faults", R"({"path":"/repos/it-org/a3/dispatches","status":429,"count":3,"retry_after":1})");
  Payload push = APush(corpus_);
  std::string run = "budget-" + Unique() + "-";
  // 20 events x 10 repos = 200 writes offered at once: ten times what one
  // window allows. They arrive before dispatch starts, so L1 and L4 work is
  // queued together.
  for (int i = 0; i < 20; ++i) stack.Produce(push, run + std::to_string(i));
  stack.Flush();
  auto start = std::chrono::steady_clock::now();
  // One batch for all 20 (a 5 ms linger splits it when the machine is busy,
  // and the first piece's L1 writes then go before the rest is planned).
  ASSERT_NE(stack.StartDispatch(1, {{"RELAY_GITHUB_MAX_WRITES_PER_MINUTE", "20"},
                                    {"RELAY_GITHUB_WRITE_WINDOW", "1s"},
                                    {"RELAY_DISPATCH_BATCH_LINGER", "1s"}}),
            0)
      << stack.Log(1);
  EXPECT_EQ(stack.WaitForDispatches(200, 120s, 3s), 200u);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 9s) << "200 writes at 20 a second";
  auto stats = stack.Fake("GET", "/_fake/stats");
  EXPECT_EQ(stats.at("breaches").at("secondary").as_int64(), 0);
  EXPECT_EQ(stats.at("breaches").at("primary").as_int64(), 0);
  auto calls = DispatchCalls(stack);
  std::sort(calls.begin(), calls.end(), [](const Call& a, const Call& b) { return a.t0 < b.t0; });
  int l1_in_first_half = 0;
  std::string order;
  for (size_t i = 0; i < 100 && i < calls.size(); ++i) {
    bool l1 = calls[i].repo.find("/a") != std::string::npos;
    l1_in_first_half += l1;
    order += l1 ? '1' : '4';
  }
  // Apart from what the workers held before the L4 work was queued, L4 first.
  EXPECT_LE(l1_in_first_half, 8) << "levels of the first 100 writes: " << order;
}

// Issue 15, item 3: one GitHub budget for every instance. Two instances
// share the writes (dispatch requests keyed by ten repos, so both own
// some), GitHub's side allows 20 writes a second and 70 calls an
// installation per 3 s, each instance is configured with those same
// ceilings, and ten times that is offered at once: together they stay
// under every limit (0 breaches the fake counts), and nothing is lost.
TEST_F(DispatchIT, TwoInstancesShareOneBudgetAndNeverBreachGitHubsLimits) {
  DispatchStack stack("shared");
  stack.SetAllowlist(kTenRepos);
  stack.Fake("POST", "/_fake/config",
             R"({"content_limit":{"per_window":20,"window_seconds":1},"rate_limit":{"limit":70,"window_seconds":3}})");
  std::map<std::string, std::string> env = {{"RELAY_GITHUB_MAX_WRITES_PER_MINUTE", "20"},
                                            {"RELAY_GITHUB_WRITE_WINDOW", "1s"},
                                            {"RELAY_KAFKA_SESSION_TIMEOUT", "6s"}};
  uint16_t p1 = stack.StartDispatch(1, env), p2 = stack.StartDispatch(2, env);
  ASSERT_NE(p1, 0) << stack.Log(1);
  ASSERT_NE(p2, 0) << stack.Log(2);
  auto assigned = [&](int n) { return stack.Log(n).find("partitions assigned") != std::string::npos; };
  ASSERT_TRUE(relay::testing::WaitFor([&] { return assigned(1) && assigned(2); }, 60s));
  std::this_thread::sleep_for(2s);  // the group settles
  std::string run = "shared-" + Unique() + "-";
  for (int i = 0; i < 200; ++i) {
    v1::GitHubRequest r;
    r.set_id(run + std::to_string(i));
    r.set_repo("it-org/r" + std::to_string(i % 10));
    r.set_level(2);
    r.set_delivery_id(run + std::to_string(i));
    r.mutable_dispatch()->set_event_type("push");
    r.mutable_dispatch()->set_client_payload_json(R"({"event_type":"push","client_payload":{"n":)" +
                                                  std::to_string(i) + "}}");
    stack.ProduceKeyed("github.requests", r.repo(), r.SerializeAsString());
  }
  stack.Flush();
  auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(stack.WaitForDispatches(200, 120s, 3s), 200u);
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_GE(took, 8s) << "200 writes at 20 a second";
  auto stats = stack.Fake("GET", "/_fake/stats");
  EXPECT_EQ(stats.at("breaches").at("secondary").as_int64(), 0);
  EXPECT_EQ(stats.at("breaches").at("primary").as_int64(), 0);
  EXPECT_EQ(stats.at("breaches").at("retry_after").as_int64(), 0);
  double w1 = Metric(p1, "relay_github_writes_total{kind=\"dispatch\",result=\"done\"}");
  double w2 = Metric(p2, "relay_github_writes_total{kind=\"dispatch\",result=\"done\"}");
  std::cout << "instance 1 wrote " << w1 << ", instance 2 wrote " << w2 << " in "
            << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms" << std::endl;
  EXPECT_GT(w1, 0);
  EXPECT_GT(w2, 0);
  EXPECT_EQ(w1 + w2, 200);
  EXPECT_GT(Metric(p1, "relay_github_budget_claims_total{result=\"granted\"}"), 0);
}

// Issue 15, item 4: a rebalance during a GitHub outage. Every call hangs
// (60 s each) when a second instance joins: the first gives its started
// writes dispatch.revoke_wait (2 s) and lets the partitions go, instead of
// holding the whole group inside the rebalance callback for as long as
// GitHub takes (up to retry_deadline + request_timeout before). The new
// owner makes those writes again, each marked repeated and counted.
TEST_F(DispatchIT, ARebalanceDuringAnOutageIsBoundedAndWritesInFlightAreRepeatedMarked) {
  DispatchStack stack("revoke");
  stack.SetAllowlist("L2: [it-org/r0, it-org/r1]\n");
  std::map<std::string, std::string> env = {{"RELAY_KAFKA_SESSION_TIMEOUT", "6s"},
                                            {"RELAY_DISPATCH_REVOKE_WAIT", "2s"},
                                            {"RELAY_GITHUB_REQUEST_TIMEOUT", "90s"},
                                            {"RELAY_KAFKA_MAX_POLL_INTERVAL", "120s"}};
  uint16_t p1 = stack.StartDispatch(1, env);
  ASSERT_NE(p1, 0) << stack.Log(1);
  Payload push = APush(corpus_);
  std::string run = "revoke-" + Unique() + "-";
  // One event while GitHub answers, so installation tokens are cached and
  // the writes below hang in the write itself, after their STARTED mark.
  stack.Produce(push, run + "warm");
  stack.Flush();
  ASSERT_EQ(stack.WaitForDispatches(2, 60s, 0ms), 2u) << stack.Log(1);
  stack.Fake("POST", "/_fake/config", R"({"latency_ms":60000})");
  for (int i = 0; i < 4; ++i) stack.Produce(push, run + std::to_string(i));
  stack.Flush();
  // Instance 1 owns everything and has its writes in flight (STARTED).
  ASSERT_TRUE(relay::testing::WaitFor([&] { return stack.Fake("GET", "/_fake/stats").at("in_flight").as_int64() >= 8; }, 60s))
      << stack.Log(1);
  auto joined = std::chrono::steady_clock::now();
  uint16_t p2 = stack.StartDispatch(2, env);
  ASSERT_NE(p2, 0) << stack.Log(2);
  // The group settles (instance 2 gets partitions) within the bound, not
  // after the 60 s calls.
  auto assigned = [&] { return stack.Log(2).find("partitions assigned") != std::string::npos; };
  ASSERT_TRUE(relay::testing::WaitFor(assigned, 40s)) << stack.Log(1);
  auto settled = std::chrono::steady_clock::now() - joined;
  std::cout << "rebalance settled after " << std::chrono::duration_cast<std::chrono::milliseconds>(settled).count()
            << " ms" << std::endl;
  EXPECT_LT(settled, 20s) << "the rebalance waited for the hanging calls";
  EXPECT_GE(Metric(p1, "relay_dispatch_revoked_in_doubt_total"), 1);
  // GitHub is back: whatever moved is made by its new owner, marked.
  stack.Fake("POST", "/_fake/config", R"({"latency_ms":0})");
  stack.dispatch(1).Signal(SIGKILL);  // its hanging calls would land later as unmarked repeats
  stack.dispatch(1).Wait(10s);
  std::vector<kafka::ConsumedRecord> dispatched;
  relay::testing::WaitFor([&] { return (dispatched = TopicRecords("relay.dispatches", run)).size() >= 10; }, 120s);
  std::set<std::pair<std::string, std::string>> pairs;
  int repeated = 0;
  for (const auto& r : dispatched) {
    v1::DispatchRecord d;
    ASSERT_TRUE(d.ParseFromString(r.value));
    pairs.insert({d.delivery_id(), d.downstream_repo()});
    repeated += d.repeated();
  }
  EXPECT_EQ(pairs.size(), 10u);
  EXPECT_GE(repeated, 1) << "a write in flight at the revoke was made again without being marked";
  EXPECT_GE(Metric(p2, "relay_dispatch_repeats_total"), repeated);
}

// Issue 15, item 7: github.requests is a write channel to GitHub for
// whoever can produce to it. A request for a repo or a path relay never
// writes to is dead-lettered with the reason, and GitHub never sees it.
TEST_F(DispatchIT, RequestsForTargetsRelayNeverWritesToAreDeadLetteredNotSent) {
  DispatchStack stack("forged");
  stack.SetAllowlist(kFourLevels);
  uint16_t port = stack.StartDispatch(1);
  ASSERT_NE(port, 0) << stack.Log(1);
  std::string run = "forged-" + Unique() + "-";
  auto check_run = [&](const std::string& id, const std::string& repo, const std::string& sha) {
    v1::GitHubRequest r;
    r.set_id(run + id);
    r.set_repo(repo);
    r.set_level(4);
    r.set_delivery_id(run + id);
    r.mutable_check_run()->set_name("crcr/it-org/l4/ci/build");
    r.mutable_check_run()->set_head_sha(sha);
    r.mutable_check_run()->set_external_id("1/1/build");
    r.mutable_check_run()->set_status("completed");
    r.mutable_check_run()->set_conclusion("success");
    return r.SerializeAsString();
  };
  const std::string sha = "0123456789abcdef0123456789abcdef01234567";
  stack.ProduceRaw("github.requests", check_run("evil", "evil-org/target", sha));
  stack.ProduceRaw("github.requests", check_run("dotdot", "it-org/..", sha));
  stack.ProduceRaw("github.requests", check_run("path", stack.upstream(), sha + "/../../x"));
  v1::GitHubRequest dispatch;
  dispatch.set_id(run + "stranger");
  dispatch.set_repo("evil-org/target");
  dispatch.set_delivery_id(run + "stranger");
  dispatch.mutable_dispatch()->set_event_type("push");
  dispatch.mutable_dispatch()->set_client_payload_json("{}");
  stack.ProduceRaw("github.requests", dispatch.SerializeAsString());
  stack.ProduceRaw("github.requests", check_run("good", stack.upstream(), sha));
  stack.Flush();
  std::map<std::string, std::string> reasons;  // delivery -> reason
  auto deadline = std::chrono::steady_clock::now() + 60s;
  while (reasons.size() < 4 && std::chrono::steady_clock::now() < deadline) {
    for (const auto& r : TopicRecords("github.requests.dlq", run)) {
      reasons[*r.FindHeader("relay-delivery-id")] = *r.FindHeader("relay-dlq-reason");
    }
    std::this_thread::sleep_for(300ms);
  }
  ASSERT_EQ(reasons.size(), 4u);
  EXPECT_THAT(reasons[run + "evil"], HasSubstr("upstream repository"));
  EXPECT_THAT(reasons[run + "dotdot"], HasSubstr("not an owner/name"));
  EXPECT_THAT(reasons[run + "path"], HasSubstr("head_sha"));
  EXPECT_THAT(reasons[run + "stranger"], HasSubstr("allowlisted repositories only"));
  // The good one was carried out, and nothing touched the others' targets.
  deadline = std::chrono::steady_clock::now() + 30s;
  while (TopicRecords("github.outcomes", run).empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(200ms);
  }
  EXPECT_EQ(TopicRecords("github.outcomes", run).size(), 1u);
  json::value calls = stack.Fake("GET", "/_fake/calls");
  for (auto& c : calls.as_array()) {
    std::string repo(c.at("repo").as_string());
    EXPECT_NE(repo, "evil-org/target");
    EXPECT_EQ(std::string(c.at("path").as_string()).find(".."), std::string::npos);
  }
  // (Other tests' records on the shared topic count too.)
  EXPECT_GE(Metric(port, "relay_dispatch_requests_refused_total"), 4);
}

// Issue 20: the App uninstalled and reinstalled mid-run (new installation
// ids for the same repositories), and one repository removed from it. Every
// write to a repository still installed goes through within a minute, none
// dead-lettered; the removed repository's writes are dead-lettered as "app
// not installed" and counted apart; GitHub sees a handful of 401s, not one
// per write.
TEST_F(DispatchIT, AReinstalledAppRecoversAtOnceAndOnlyAnUninstalledRepoIsDeadLettered) {
  DispatchStack stack("reinstall");
  stack.SetAllowlist("L2: [it-org/a, it-org/b, other-org/c]\n");
  stack.Fake("POST", "/_fake/config", R"({"latency_ms":5,"rate_limit":{"limit":1000000,"window_seconds":3600}})");
  uint16_t port = stack.StartDispatch(1);
  ASSERT_NE(port, 0) << stack.Log(1);
  Payload push = APush(corpus_);
  std::string run = "reinstall-" + Unique() + "-";
  // A steady stream: 200 events (600 writes), the change after the first 60.
  std::thread feeder([&] {
    for (int i = 0; i < 200; ++i) {
      stack.Produce(push, run + std::to_string(i));
      std::this_thread::sleep_for(20ms);
    }
  });
  // The change comes while writes still flow (not after: a settled count
  // would be the end of the stream on a slow build).
  ASSERT_TRUE(relay::testing::WaitFor(
      [&] { return stack.Fake("GET", "/_fake/stats").at("dispatches").as_int64() >= 150; }, 60s, 10ms));
  auto changed = std::chrono::steady_clock::now();
  stack.Fake("POST", "/_fake/config", R"({"reinstall":true,"not_installed":["it-org/b"]})");
  feeder.join();
  stack.Flush();
  // Every write to a and c (400), within a minute of the change.
  std::set<std::pair<std::string, std::string>> done;
  auto deadline = changed + 60s;
  for (;;) {
    done.clear();
    for (const auto& c : DispatchCalls(stack)) {
      if (c.status == 204 && c.repo != "it-org/b") done.insert({c.delivery, c.repo});
    }
    if (done.size() >= 400 || std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(200ms);
  }
  EXPECT_EQ(done.size(), 400u) << "writes to installed repositories missing a minute after the reinstall";
  // Every write to b: done before the change, or dead-lettered as not installed.
  std::set<std::string> b_done;
  for (const auto& c : DispatchCalls(stack)) {
    if (c.status == 204 && c.repo == "it-org/b") b_done.insert(c.delivery);
  }
  std::map<std::string, std::string> dead;  // delivery -> reason, b only
  for (int i = 0; i < 100 && b_done.size() + dead.size() < 200; ++i) {
    for (const auto& r : TopicRecords("github.requests.dlq", run)) {
      v1::GitHubRequest req;
      ASSERT_TRUE(req.ParseFromString(r.value));
      EXPECT_EQ(req.repo(), "it-org/b") << "a write to an installed repository was dead-lettered: "
                                        << *r.FindHeader("relay-dlq-reason");
      if (req.repo() == "it-org/b") dead[req.delivery_id()] = *r.FindHeader("relay-dlq-reason");
    }
    if (b_done.size() + dead.size() < 200) std::this_thread::sleep_for(500ms);
  }
  EXPECT_EQ(b_done.size() + dead.size(), 200u);
  EXPECT_GT(dead.size(), 0u);
  for (const auto& [delivery, reason] : dead) EXPECT_THAT(reason, HasSubstr("app not installed")) << delivery;
  EXPECT_EQ(Metric(port, "relay_github_dead_letters_total{reason=\"app_not_installed\"}"), static_cast<double>(dead.size()));
  EXPECT_EQ(Metric(port, "relay_github_dead_letters_total{reason=\"failed\"}"), 0);
  // Two installations changed (it-org, other-org): a handful of 401s each
  // (the calls in flight at the change), not one per write.
  auto stats = stack.Fake("GET", "/_fake/stats");
  std::cout << "401s answered: " << stats.at("unauthorized").as_int64() << std::endl;
  EXPECT_LE(stats.at("unauthorized").as_int64(), 2 * 10);
}

}  // namespace
}  // namespace relay
