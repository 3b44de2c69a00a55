// A replay of github.webhooks to a time in the past, with live label events
// arriving meanwhile, on the real broker with the built relay-dispatch,
// relay-collector and relayctl against the fake GitHub: every PR keeps its
// labels (the last fact of relay.pr_labels, what compaction keeps and a
// collector reads at start, is the newest event's) and its check runs (no
// GitHub check-run call comes of it), and a repository added to the
// allowlist before the replay gets nothing from it. Both ways an operator
// replays: `relayctl replay` (copies) and a consumer group moved back.
#include <ctime>

#include "relay/auth/jwt.h"
#include "relay/auth/oidc.h"

#include "dispatch_it_support.h"

namespace relay::dispatch_it {
namespace {

constexpr char kIssuer[] = "https://token.actions.example.test";
constexpr char kAudience[] = "relay-it";

std::string Iso(int64_t unix_s) {
  std::time_t t = static_cast<std::time_t>(unix_s);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

// A pull_request event of `upstream`'s PR `number`, changed at `updated_s`.
Payload PullRequest(const std::string& upstream, int64_t number, const std::string& action,
                    const std::vector<std::string>& labels, int64_t updated_s, const std::string& label = "") {
  json::array names;
  for (const auto& l : labels) names.push_back(json::object{{"name", l}});
  json::object pr{{"number", number},
                  {"state", "open"},
                  {"updated_at", Iso(updated_s)},
                  {"head", json::object{{"sha", "0123456789abcdef0123456789abcdef01234567"}, {"ref", "feature"}}},
                  {"base", json::object{{"sha", "89abcdef0123456789abcdef0123456789abcdef"}, {"ref", "main"}}},
                  {"labels", names}};
  json::object body{{"action", action}, {"number", number}, {"pull_request", pr},
                    {"repository", json::object{{"full_name", upstream}}}};
  if (!label.empty()) body["label"] = json::object{{"name", label}};
  return {"pull_request", json::serialize(body), ""};
}

// relay-collector beside the dispatch stack: the same relay token keys,
// an OIDC issuer of its own (a key and its JWKS file).
class Collector {
 public:
  explicit Collector(DispatchStack& stack) : dir_(stack.dir()) {
    auto [private_pem, public_pem] = testing::NewRsaKeyPairPem();
    key_ = *auth::RsaKey::FromPem(private_pem);
    json::array keys{*auth::ToJwk(*auth::RsaKey::FromPem(public_pem), "k1")};
    WriteFile(dir_ + "/jwks.json", json::serialize(json::object{{"keys", keys}}));
  }
  uint16_t Start() {
    std::string port_file = dir_ + "/collector.port";
    std::map<std::string, std::string> env{
        {"RELAY_HTTP_LISTEN", "127.0.0.1:0"},
        {"RELAY_HTTP_DRAIN_DELAY", "0s"},
        {"RELAY_KAFKA_BOOTSTRAP", testing::FixtureBootstrap()},
        {"RELAY_KAFKA_GROUP_ID", "it-collector-" + Unique()},
        {"RELAY_KAFKA_SESSION_TIMEOUT", "6s"},
        {"RELAY_ALLOWLIST_FILE", dir_ + "/allowlist.yaml"},
        {"RELAY_TOKENS_KEYS_FILE", dir_ + "/keys.yaml"},
        {"RELAY_COLLECTOR_OIDC_ISSUER", kIssuer},
        {"RELAY_COLLECTOR_OIDC_AUDIENCE", kAudience},
        {"RELAY_COLLECTOR_OIDC_JWKS_FILE", dir_ + "/jwks.json"}};
    proc_ = std::make_unique<Subprocess>(std::vector<std::string>{Env("RELAY_IT_COLLECTOR_BIN"), "--port-file", port_file},
                                         env, dir_ + "/collector.log");
    if (!testing::WaitForFile(port_file, 30s)) return 0;
    port_ = static_cast<uint16_t>(std::stoi(ReadFile(port_file)));
    auto deadline = std::chrono::steady_clock::now() + 60s;
    while (std::chrono::steady_clock::now() < deadline) {
      if (HttpClient("127.0.0.1", port_).Get("/readyz").status == 200 &&
          ReadFile(dir_ + "/collector.log").find("partition loaded") != std::string::npos) {
        return port_;
      }
      std::this_thread::sleep_for(100ms);
    }
    return 0;
  }
  // The downstream job's callback, as the public action posts it.
  int Callback(const std::string& repo, const json::object& client_payload, const std::string& status) {
    int64_t now = NowMs() / 1000;
    json::object claims{{"iss", kIssuer}, {"aud", kAudience}, {"sub", "repo:" + repo + ":ref:refs/heads/main"},
                        {"repository", repo}, {"repository_id", "1234"}, {"jti", "jti-" + Unique()},
                        {"iat", now}, {"nbf", now}, {"exp", now + 300}};
    json::object body = client_payload;
    body["workflow"] = json::object{{"schema_version", "1"},
                                    {"status", status},
                                    {"conclusion", status == "completed" ? json::value("success") : json::value(nullptr)},
                                    {"name", "CI"},
                                    {"url", "https://github.com/" + repo + "/actions/runs/9001"},
                                    {"run_id", "9001"},
                                    {"run_attempt", "1"},
                                    {"job_name", "xpu test"},
                                    {"check_run_id", "9001-1"},
                                    {"started_at", Iso(now - 60)},
                                    {"completed_at", nullptr}};
    return HttpClient("127.0.0.1", port_)
        .Post("/github/callback",
              {{"Authorization", "Bearer " + *auth::SignRs256(claims, key_, "k1")}, {"Content-Type", "application/json"}},
              json::serialize(body))
        .status;
  }
  std::string Log() { return ReadFile(dir_ + "/collector.log"); }

 private:
  std::string dir_;
  auth::RsaKey key_;
  std::unique_ptr<Subprocess> proc_;
  uint16_t port_ = 0;
};

// The fake GitHub's check-run writes (created or updated) on the upstream.
int CheckRunCalls(DispatchStack& stack) {
  int n = 0;
  json::value calls = stack.Fake("GET", "/_fake/calls?brief=1");
  for (auto& c : calls.as_array()) {
    std::string endpoint(c.at("endpoint").as_string());
    n += (endpoint == "POST /repos/{owner}/{repo}/check-runs" || endpoint == "PATCH /repos/{owner}/{repo}/check-runs/{id}") &&
         c.at("status").as_int64() < 300;
  }
  return n;
}

struct Fact {
  int64_t offset;
  std::set<std::string> devices;
  int64_t event_at, received_at;
  std::string delivery;
};

// The facts of a PR on relay.pr_labels, in the order they were written.
std::vector<Fact> Facts(const std::string& upstream, int64_t number) {
  std::string error;
  std::vector<Fact> out;
  for (const auto& r : testing::ReadTopic(testing::FixtureBootstrap(), "relay.pr_labels", 60s, &error)) {
    v1::PullRequestLabels l;
    if (r.key != upstream + "#" + std::to_string(number) || !l.ParseFromString(r.value)) continue;
    out.push_back({r.offset, {l.crcr_devices().begin(), l.crcr_devices().end()}, l.event_at_unix_ms(),
                   l.received_at_unix_ms(), l.delivery_id()});
  }
  EXPECT_EQ(error, "");
  return out;
}

// What a PR's facts must show: the last written (what compaction keeps and
// a collector reads at start) is `want`, and none was written after a
// newer one (event times rise with the offsets).
void ExpectLabels(const std::string& upstream, int64_t number, const std::set<std::string>& want) {
  auto facts = Facts(upstream, number);
  ASSERT_FALSE(facts.empty());
  std::string seen;
  for (const auto& f : facts) {
    seen += "\n  offset " + std::to_string(f.offset) + " " + f.delivery + " event_at " + std::to_string(f.event_at) +
            " received_at " + std::to_string(f.received_at) + " devices " + std::to_string(f.devices.size());
  }
  SCOPED_TRACE("the facts of PR " + std::to_string(number) + ":" + seen);
  EXPECT_EQ(facts.back().devices, want) << "PR " << number << "'s labels rolled back";
  for (size_t i = 1; i < facts.size(); ++i) {
    EXPECT_LT(std::make_pair(facts[i - 1].event_at, facts[i - 1].received_at),
              std::make_pair(facts[i].event_at, facts[i].received_at))
        << "PR " << number << ": the fact at offset " << facts[i].offset << " is of an older event than the one before";
  }
}

// Waits until the metric reaches `at_least` (or 60 s); its value.
double WaitForMetric(uint16_t port, const std::string& sample, double at_least) {
  auto deadline = std::chrono::steady_clock::now() + 60s;
  while (Metric(port, sample) < at_least && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(100ms);
  return Metric(port, sample);
}

TEST_F(DispatchIT, AReplayToThePastWithLiveLabelsChangesNoLabelsNoCheckRunsAndFeedsNoNewRepository) {
  DispatchStack stack("replay");
  std::string l3 = "it-org/xpu-" + Unique(), added = "it-org/added-" + Unique();
  const std::string kL3 = "L3:\n  xpu:\n    " + l3 + ": [oncall]\n";
  stack.SetAllowlist(kL3);
  uint16_t port = stack.StartDispatch(1);
  ASSERT_NE(port, 0) << stack.Log(1);
  Collector collector(stack);
  ASSERT_NE(collector.Start(), 0) << collector.Log();
  const std::string up = stack.upstream();
  const int64_t pr = 4242, other = 4343;
  std::string run = "replay-" + Unique() + "-";
  // Every event's time is GitHub's, in the payload: the history starts a
  // minute ago; the replays start before it.
  const int64_t t0 = NowMs() / 1000 - 60;
  const std::string from = Iso(NowMs() / 1000 - 1);
  std::this_thread::sleep_for(1500ms);
  auto published = [&] { return "relay_dispatch_label_facts_total{result=\"published\"}"; };

  // The history. PR 4242: a push to it, labelled for xpu, the label
  // removed, then its L3 job runs (no label: no check run). PR 4343:
  // labelled npu.
  Payload xpu = PullRequest(up, pr, "labeled", {"ciflow/crcr/xpu"}, t0 + 2, "ciflow/crcr/xpu");
  // GitHub slow: the batch waits longer than dispatch.batch_wait (1 s) for
  // its fan-out and comes again; its label facts must not be sent again.
  stack.Fake("POST", "/_fake/config", R"({"latency_ms":1500})");
  stack.Produce(PullRequest(up, pr, "synchronize", {}, t0 + 1), run + "sync");
  stack.Produce(xpu, run + "xpu");
  stack.Produce(PullRequest(up, other, "labeled", {"ciflow/crcr/npu"}, t0 + 3, "ciflow/crcr/npu"), run + "npu");
  stack.Produce(PullRequest(up, pr, "unlabeled", {}, t0 + 4, "ciflow/crcr/xpu"), run + "unxpu");
  stack.Flush();
  ASSERT_EQ(stack.WaitForDispatches(1, 60s), 1u);
  ASSERT_EQ(WaitForMetric(port, published(), 3), 3);
  stack.Fake("POST", "/_fake/config", R"({"latency_ms":0})");
  auto dispatched = stack.Dispatches().at(0);
  ASSERT_EQ(dispatched.at("repo").as_string(), l3);
  const json::object& client_payload = dispatched.at("body").at("client_payload").as_object();
  std::this_thread::sleep_for(1s);  // the collector has read the facts
  ASSERT_EQ(collector.Callback(l3, client_payload, "in_progress"), 200) << collector.Log();
  ASSERT_EQ(collector.Callback(l3, client_payload, "completed"), 200) << collector.Log();
  std::this_thread::sleep_for(3s);
  ASSERT_EQ(CheckRunCalls(stack), 0) << "the job's PR has no ciflow/crcr/xpu label";
  const size_t dispatches = stack.Dispatches().size();

  // A repository joins before the replay.
  stack.SetAllowlist(kL3 + "L1: [" + added + "]\n");
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (Metric(port, "relay_allowlist_repos{level=\"L1\"}") != 1 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(50ms);
  }
  ASSERT_EQ(Metric(port, "relay_allowlist_repos{level=\"L1\"}"), 1);

  // 1. `relayctl replay` of the upstream's records of the history, while
  // live label events arrive, and GitHub delivers the xpu label again
  // (a redelivery: the same delivery, the same old event).
  const std::string to = Iso(NowMs() / 1000);
  std::this_thread::sleep_for(1100ms);
  CtlRun replay;
  std::thread replayer([&] {
    replay = Relayctl("replay github.webhooks --key " + up + " --from-time " + from + " --to-time " + to + " --rate 2");
  });
  std::this_thread::sleep_for(500ms);
  stack.Produce(PullRequest(up, pr, "labeled", {"ciflow/crcr/npu"}, t0 + 10, "ciflow/crcr/npu"), run + "live1");
  stack.Produce(PullRequest(up, other, "unlabeled", {}, t0 + 11, "ciflow/crcr/npu"), run + "live2");
  stack.Produce(xpu, run + "xpu");
  stack.Flush();
  replayer.join();
  ASSERT_EQ(replay.code, 0) << replay.err;
  // The 4 records of the history came again: a fan-out (to the L3 repo and
  // the new one) and three label facts, none published.
  EXPECT_EQ(WaitForMetric(port, "relay_dispatch_label_facts_total{result=\"replayed\"}", 3), 3);
  EXPECT_EQ(Metric(port, "relay_dispatch_writes_skipped_total{reason=\"replayed\"}"), 2);
  EXPECT_EQ(WaitForMetric(port, published(), 5), 5);
  EXPECT_EQ(WaitForMetric(port, "relay_dispatch_label_facts_total{result=\"older\"}", 1), 1);  // the redelivery
  std::this_thread::sleep_for(3s);
  ExpectLabels(up, pr, {"npu"});
  ExpectLabels(up, other, {});
  EXPECT_EQ(CheckRunCalls(stack), 0) << "an old xpu label raised the job's check run";
  EXPECT_EQ(stack.Dispatches().size(), dispatches) << "the replay dispatched again";
  for (const auto& c : DispatchCalls(stack)) EXPECT_NE(c.repo, added) << c.delivery;

  // 2. The consumer group moved back to before the history (dispatch
  // stopped, as the broker requires), a live event while it reads again.
  stack.dispatch(1).Signal(SIGTERM);
  ASSERT_EQ(stack.dispatch(1).Wait(60s), 0);
  CtlRun reset = Relayctl("replay --group " + stack.group() + " --reset-to " + from);
  ASSERT_EQ(reset.code, 0) << reset.err;
  stack.Produce(PullRequest(up, pr, "unlabeled", {}, t0 + 20, "ciflow/crcr/npu"), run + "live3");
  stack.Flush();
  port = stack.StartDispatch(2);
  ASSERT_NE(port, 0) << stack.Log(2);
  // Read again: the history and the events of step 1 (6 facts, a fan-out
  // to two repos), the copies (still copies); the live event published.
  EXPECT_EQ(WaitForMetric(port, published(), 1), 1);
  EXPECT_EQ(WaitForMetric(port, "relay_dispatch_label_facts_total{result=\"read_again\"}", 6), 6);
  EXPECT_EQ(Metric(port, "relay_dispatch_writes_skipped_total{reason=\"read_again\"}"), 2);
  EXPECT_EQ(Metric(port, "relay_dispatch_label_facts_total{result=\"replayed\"}"), 3);
  std::this_thread::sleep_for(3s);
  ExpectLabels(up, pr, {});
  ExpectLabels(up, other, {});
  EXPECT_EQ(CheckRunCalls(stack), 0);
  EXPECT_EQ(stack.Dispatches().size(), dispatches);
  for (const auto& c : DispatchCalls(stack)) EXPECT_NE(c.repo, added) << c.delivery;
}

// A dead letter of github.webhooks older than the dispatch ledger
// remembers (20 days; the DLQ keeps 30, the ledger 15) is refused with the
// reason and sent nowhere; a young one beside it is redriven.
TEST_F(DispatchIT, RelayctlRedrivesNoDeadLetterOlderThanTheLedgerRemembers) {
  std::string old_key = "it-org/old-" + Unique(), young_key = "it-org/young-" + Unique();
  kafka::ProducerOptions po;
  po.bootstrap = testing::FixtureBootstrap();
  auto producer = std::move(*kafka::NewKafkaProducer(po, nullptr));
  auto dead_letter = [&](const std::string& key, int64_t received_at_ms) {
    v1::WebhookRecord r;
    r.set_delivery_id("d-" + key);
    r.set_event("push");
    r.set_repository(key);
    r.set_body("{}");
    r.set_received_at_unix_ms(received_at_ms);
    std::promise<absl::Status> acked;
    producer->Send(kafka::Record{"github.webhooks.dlq", key, r.SerializeAsString(),
                                 {{"relay-schema", "relay.v1.WebhookRecord"}, {"relay-delivery-id", r.delivery_id()},
                                  {"relay-dlq-reason", "webhook body is not a JSON object"},
                                  {"relay-dlq-topic", "github.webhooks"}, {"relay-dlq-partition", "0"},
                                  {"relay-dlq-offset", "0"}}},
                   [&](absl::Status st) { acked.set_value(std::move(st)); });
    ASSERT_TRUE(acked.get_future().get().ok());
  };
  dead_letter(old_key, NowMs() - 20LL * 24 * 3'600'000);
  dead_letter(young_key, NowMs() - 2LL * 24 * 3'600'000);
  auto redriven = [&](const std::string& key) {
    return TopicRecords("github.webhooks", "d-" + key).size();
  };

  CtlRun dry = Relayctl("--json dlq redrive github.webhooks.dlq --key " + old_key + " --dry-run");
  EXPECT_EQ(dry.code, 3) << dry.err;
  CtlRun old = Relayctl("--json dlq redrive github.webhooks.dlq --key " + old_key);
  EXPECT_EQ(old.code, 3) << old.out << old.err;
  EXPECT_THAT(old.err, HasSubstr("older than the dispatch ledger remembers"));
  auto summary = json::parse(old.out);
  EXPECT_EQ(summary.at("selected").as_int64(), 0);
  ASSERT_EQ(summary.at("refused_past_ledger_memory").as_array().size(), 1u);
  EXPECT_THAT(std::string(summary.at("refused_past_ledger_memory").at(0).at("reason").as_string()),
              HasSubstr("480 h old, past the 336 h"));
  CtlRun young = Relayctl("--json dlq redrive github.webhooks.dlq --key " + young_key);
  EXPECT_EQ(young.code, 0) << young.err;
  EXPECT_EQ(json::parse(young.out).at("redriven").as_int64(), 1);
  EXPECT_EQ(redriven(old_key), 0u);
  EXPECT_EQ(redriven(young_key), 1u);
}

}  // namespace
}  // namespace relay::dispatch_it
