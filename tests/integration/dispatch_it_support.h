// What the dispatch integration tests share: the stack (the fake GitHub,
// relay-dispatch processes and a producer writing github.webhooks as intake
// would), the fixture, and the checks of a crash's aftermath. The tests
// are in dispatch_it_test.cc (fan-out, allowlist, failures, budget) and
// dispatch_it_faults_test.cc (kills, takeovers, rebalances, replays,
// several instances) and dispatch_it_clock_test.cc (the shared budget with
// a host clock off, the budget topic's timestamps), one binary.
#pragma once

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

#include "relay/base/digest.h"
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

namespace relay::dispatch_it {

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
inline std::vector<Payload> Find(const std::vector<Payload>& corpus, const std::string& event, const std::string& action) {
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

inline int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
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
    dispatch_[n] = std::make_unique<Subprocess>(
        std::vector<std::string>{Env("RELAY_IT_DISPATCH_BIN"), "--port-file", port_file}, Settings(std::move(env)),
        dir_ + "/dispatch" + std::to_string(n) + ".log");
    if (!testing::WaitForFile(port_file, 30s)) return 0;
    return static_cast<uint16_t>(std::stoi(ReadFile(port_file)));
  }
  // relay-dispatch's settings on this stack (RELAY_* variables); `env`'s win.
  std::map<std::string, std::string> Settings(std::map<std::string, std::string> env) const {
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
    return env;
  }
  Subprocess& dispatch(int n) { return *dispatch_.at(n); }
  std::string Log(int n) { return ReadFile(dir_ + "/dispatch" + std::to_string(n) + ".log"); }
  // The last `max` warn/error lines of instance n's log: what a failure
  // message shows (a whole log is megabytes).
  std::string Notable(int n, size_t max = 40) {
    std::vector<std::string> lines;
    std::istringstream in(Log(n));
    for (std::string line; std::getline(in, line);) {
      if (line.find("\"level\":\"warn\"") != std::string::npos || line.find("\"level\":\"error\"") != std::string::npos ||
          line.find("partitions ") != std::string::npos) {
        lines.push_back(line.substr(0, 400));
      }
    }
    std::string out;
    for (size_t i = lines.size() > max ? lines.size() - max : 0; i < lines.size(); ++i) out += lines[i] + "\n";
    return out;
  }

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
    auto digest = Sha256(p.body);
    r.set_body_sha256(digest.data(), digest.size());
    r.set_content_type("application/json");
    r.set_received_at_unix_ms(received_at_ms_ ? received_at_ms_ : NowMs());
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
  // `n` push dispatches to it-org/r0..r9 on github.requests, ids `run`0..,
  // flushed.
  void ProducePushDispatches(const std::string& run, int n) {
    for (int i = 0; i < n; ++i) {
      v1::GitHubRequest r;
      r.set_id(run + std::to_string(i));
      r.set_repo("it-org/r" + std::to_string(i % 10));
      r.set_level(2);
      r.set_delivery_id(run + std::to_string(i));
      r.mutable_dispatch()->set_event_type("push");
      r.mutable_dispatch()->set_client_payload_json(R"({"event_type":"push","client_payload":{"n":)" +
                                                    std::to_string(i) + "}}");
      ProduceKeyed("github.requests", r.repo(), r.SerializeAsString());
    }
    Flush();
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

  // Intake's receipt time of the next records Produce makes (0: now).
  void set_received_at_ms(int64_t ms) { received_at_ms_ = ms; }
  const std::string& upstream() const { return upstream_; }
  const std::string& dir() const { return dir_; }
  std::string group() const { return group_; }
  void set_group(std::string g) { group_ = std::move(g); }

 private:
  std::string dir_, upstream_, group_;
  uint16_t github_port_ = 0;
  int64_t received_at_ms_ = 0;
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
inline std::vector<kafka::ConsumedRecord> TopicRecords(const std::string& topic, const std::string& prefix) {
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

// What the fake recorded of each dispatch call.
struct Call {
  std::string key, repo, delivery;
  int64_t t0 = 0, t1 = 0;
  int status = 0;
};

inline std::vector<Call> DispatchCalls(DispatchStack& stack) {
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
inline void ExpectOnlyInFlightCallsRepeated(const std::vector<Call>& calls, size_t want_pairs, KillWindow kill,
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

struct CtlRun {
  int code = -1;
  std::string out, err;
};

// Runs relayctl with `args` (a shell word list) on the fixture broker.
inline CtlRun Relayctl(const std::string& args, const std::string& bootstrap = testing::FixtureBootstrap()) {
  std::string dir = Env("RELAY_IT_DIR") + "/relayctl-" + Unique();
  testing::RunCommand("mkdir -p " + dir);
  CtlRun r;
  r.code = testing::RunCommand(Env("RELAY_IT_RELAYCTL_BIN") + " --no-progress --bootstrap " + bootstrap + " " + args +
                                   " 2>" + dir + "/err",
                               &r.out);
  r.err = ReadFile(dir + "/err");
  return r;
}

constexpr char kTenRepos[] = "L2: [it-org/r0, it-org/r1, it-org/r2, it-org/r3, it-org/r4, it-org/r5, it-org/r6, it-org/r7, it-org/r8, it-org/r9]\n";

inline Payload APush(const std::vector<Payload>& corpus) {
  for (const auto& p : Find(corpus, "push", "")) {
    if (p.body.find("\"deleted\": false") != std::string::npos || p.body.find("\"deleted\":false") != std::string::npos) return p;
  }
  return {};
}

}  // namespace relay::dispatch_it
