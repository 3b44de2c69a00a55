// relay-intake end to end on the real Kafka broker: the real binary, real
// GitHub payloads signed by GitHub's reference code, read back by an
// independent consumer (tests/support/topic_reader).
#include <signal.h>

#include <atomic>
#include <fstream>
#include <future>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "relay/base/digest.h"
#include "relay/github/webhook_signature.h"
#include "relay/v1/webhook.pb.h"
#include "support/fixtures.h"
#include "support/http_client.h"
#include "support/kafka_admin.h"
#include "support/subprocess.h"
#include "support/timing.h"
#include "support/topic_reader.h"

namespace relay {
namespace {

using testing::Env;
using testing::HttpClient;
using testing::ReadFile;
using testing::Subprocess;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

constexpr char kTopic[] = "github.webhooks";

using Payload = testing::CorpusPayload;
using testing::LoadCorpus;

std::string RunId() {
  std::random_device rd;
  return "it-" + std::to_string(rd()) + "-";
}

std::string KafkaDev(const std::string& verb) {
  std::string out;
  testing::RunCommand(Env("RELAY_ROOT") + "/tools/kafka/kafka-dev " + verb + " " + Env("RELAY_IT_KAFKA_DIR") +
                          " 2>&1",
                      &out);
  return out;
}

// The real relay-intake binary on a free port.
class Intake {
 public:
  explicit Intake(std::map<std::string, std::string> env = {}) {
    std::string dir = Env("RELAY_IT_DIR");
    port_file_ = dir + "/intake-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++) + ".port";
    std::remove(port_file_.c_str());
    env.emplace("RELAY_HTTP_LISTEN", "127.0.0.1:0");
    env.emplace("RELAY_KAFKA_BOOTSTRAP", testing::FixtureBootstrap());
    env.emplace("RELAY_INTAKE_WEBHOOK_SECRETS", Env("RELAY_IT_SECRET"));
    log_ = dir + "/intake.log";
    process_ = std::make_unique<Subprocess>(
        std::vector<std::string>{Env("RELAY_IT_INTAKE_BIN"), "--port-file", port_file_}, env, log_);
    if (testing::WaitForFile(port_file_, 20s)) port_ = static_cast<uint16_t>(std::stoi(ReadFile(port_file_)));
  }
  uint16_t port() const { return port_; }
  Subprocess& process() { return *process_; }
  std::string Metrics() { return HttpClient("127.0.0.1", port_).Get("/metrics").body; }

 private:
  static inline int counter_ = 0;
  std::string port_file_, log_;
  uint16_t port_ = 0;
  std::unique_ptr<Subprocess> process_;
};

std::map<std::string, std::string> Headers(const Payload& p, const std::string& delivery) {
  return {{"X-GitHub-Event", p.event},
          {"X-GitHub-Delivery", delivery},
          {"X-Hub-Signature-256", p.signature},
          {"Content-Type", "application/json"},
          {"User-Agent", "GitHub-Hookshot/relay-it"}};
}

// Posts the corpus round-robin from several connections, each request with
// a fresh delivery id (run + counter), until Stop() or, with
// stop_when_closed, until the server stops answering. Records every id's
// status (0: no response).
class WebhookStream {
 public:
  WebhookStream(uint16_t port, const std::vector<Payload>& corpus, std::string run,
                std::chrono::milliseconds timeout, bool stop_when_closed) {
    for (int i = 0; i < 4; ++i) {
      senders_.emplace_back([=, this, &corpus] {
        HttpClient client("127.0.0.1", port, timeout);
        while (!stop_) {
          int n = counter_++;
          const Payload& p = corpus[static_cast<size_t>(n) % corpus.size()];
          std::string id = run + std::to_string(n);
          auto result = client.Post("/github/webhook", Headers(p, id), p.body);
          {
            std::lock_guard lock(mu_);
            status_by_id_[id] = result.status;
            if (result.status == 0) error_by_id_[id] = result.error;
          }
          if (result.status == 0 && stop_when_closed) return;
        }
      });
    }
  }
  ~WebhookStream() { Stop(); }
  void Stop() {
    stop_ = true;
    for (auto& t : senders_) {
      if (t.joinable()) t.join();
    }
  }
  int Count(int status) const {
    std::lock_guard lock(mu_);
    int n = 0;
    for (auto& [id, s] : status_by_id_) n += s == status;
    return n;
  }
  // Waits until Count(status) >= n or the timeout; returns whether it got there.
  bool WaitFor(int status, int n, std::chrono::milliseconds timeout) const {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (Count(status) < n) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(10ms);
    }
    return true;
  }
  std::map<std::string, int> statuses() const {  // call after Stop()
    std::lock_guard lock(mu_);
    return status_by_id_;
  }
  std::string error(const std::string& id) const {
    std::lock_guard lock(mu_);
    auto it = error_by_id_.find(id);
    return it == error_by_id_.end() ? "" : it->second;
  }

 private:
  mutable std::mutex mu_;
  std::map<std::string, int> status_by_id_;
  std::map<std::string, std::string> error_by_id_;  // no response: why
  std::atomic<bool> stop_{false};
  std::atomic<int> counter_{0};
  std::vector<std::thread> senders_;
};

// Delivery id -> records in the topic with that id, for ids with `prefix`.
std::map<std::string, std::vector<v1::WebhookRecord>> TopicByDelivery(const std::string& prefix) {
  std::string error;
  auto records = testing::ReadTopic(testing::FixtureBootstrap(), kTopic, 60s, &error);
  EXPECT_TRUE(error.empty()) << error;
  std::map<std::string, std::vector<v1::WebhookRecord>> out;
  for (const auto& r : records) {
    v1::WebhookRecord w;
    EXPECT_TRUE(w.ParseFromString(r.value));
    if (w.delivery_id().rfind(prefix, 0) != 0) continue;
    const std::string* schema = r.FindHeader("relay-schema");
    EXPECT_TRUE(schema && *schema == "relay.v1.WebhookRecord");
    EXPECT_EQ(r.key, w.repository().empty() ? w.delivery_id() : w.repository());
    out[w.delivery_id()].push_back(std::move(w));
  }
  return out;
}

class IntakeIT : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(Env("RELAY_IT_KAFKA_DIR").empty()) << "run through ctest (fixtures start the broker)";
    // A test that stopped the broker restarts it; make sure it is up.
    KafkaDev("restart");
    corpus_ = LoadCorpus();
    ASSERT_GE(corpus_.size(), 300u) << "the @octokit/webhooks-examples corpus is missing";
  }
  std::vector<Payload> corpus_;
};

TEST_F(IntakeIT, EveryExamplePayloadLandsExactlyOnceByteForByte) {
  Intake intake;
  ASSERT_NE(intake.port(), 0) << "relay-intake did not start";
  std::string run = RunId();
  std::set<std::string> events;
  // Two clients in parallel, as GitHub would open several connections.
  auto post_half = [&](size_t start) {
    HttpClient client("127.0.0.1", intake.port());
    for (size_t i = start; i < corpus_.size(); i += 2) {
      auto r = client.Post("/github/webhook", Headers(corpus_[i], run + std::to_string(i)), corpus_[i].body);
      EXPECT_EQ(r.status, 202) << corpus_[i].event << " #" << i << ": " << r.body << r.error;
    }
  };
  auto other = std::async(std::launch::async, post_half, 1);
  post_half(0);
  other.get();
  for (const auto& p : corpus_) events.insert(p.event);
  EXPECT_TRUE(events.count("ping"));

  // GitHub redelivery of a few ids: acknowledged, not recorded again.
  HttpClient client("127.0.0.1", intake.port());
  for (size_t i : {size_t{0}, size_t{7}, corpus_.size() - 1}) {
    auto r = client.Post("/github/webhook", Headers(corpus_[i], run + std::to_string(i)), corpus_[i].body);
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_THAT(r.body, HasSubstr("duplicate"));
  }

  auto topic = TopicByDelivery(run);
  ASSERT_EQ(topic.size(), corpus_.size());
  for (size_t i = 0; i < corpus_.size(); ++i) {
    auto it = topic.find(run + std::to_string(i));
    ASSERT_NE(it, topic.end()) << "missing " << i;
    ASSERT_EQ(it->second.size(), 1u) << "delivery " << i << " recorded " << it->second.size() << " times";
    const auto& rec = it->second[0];
    EXPECT_EQ(rec.body(), corpus_[i].body) << "body of " << i << " not byte-identical";
    EXPECT_EQ(rec.event(), corpus_[i].event);
    EXPECT_GT(rec.received_at_unix_ms(), 0);
  }
  std::string metrics = intake.Metrics();
  EXPECT_THAT(metrics, HasSubstr("relay_intake_webhooks_total{outcome=\"accepted\"} " + std::to_string(corpus_.size())));
  EXPECT_THAT(metrics, HasSubstr("relay_intake_webhooks_total{outcome=\"duplicate\"} 3"));
}

TEST_F(IntakeIT, EveryBadInputGetsItsStatusACounterAndNoRecord) {
  Intake intake({{"RELAY_HTTP_HEADER_TIMEOUT", "500ms"}, {"RELAY_HTTP_BODY_TIMEOUT", "500ms"}});
  ASSERT_NE(intake.port(), 0);
  std::string run = RunId();
  const Payload& p = corpus_[0];
  HttpClient client("127.0.0.1", intake.port());
  auto post = [&](std::map<std::string, std::string> headers, const std::string& body) {
    return client.Post("/github/webhook", headers, body).status;
  };
  auto h = Headers(p, run + "bad");

  auto no_sig = h;
  no_sig.erase("X-Hub-Signature-256");
  EXPECT_EQ(post(no_sig, p.body), 401);
  auto bad_sig = h;
  bad_sig["X-Hub-Signature-256"] = github::SignWebhook("some-other-secret-0123", p.body);
  EXPECT_EQ(post(bad_sig, p.body), 401);
  EXPECT_EQ(post(h, p.body + " "), 401);  // body altered after signing
  auto no_event = h;
  no_event.erase("X-GitHub-Event");
  EXPECT_EQ(post(no_event, p.body), 400);
  auto no_delivery = h;
  no_delivery.erase("X-GitHub-Delivery");
  EXPECT_EQ(post(no_delivery, p.body), 400);
  std::string not_json = "this is not json";
  auto nj = h;
  nj["X-Hub-Signature-256"] = github::SignWebhook(Env("RELAY_IT_SECRET"), not_json);
  EXPECT_EQ(post(nj, not_json), 400);
  EXPECT_EQ(client.Get("/github/webhook").status, 405);
  EXPECT_EQ(client.Post("/github/hooks", h, p.body).status, 404);

  // Slow and truncated clients are cut off at their 500 ms timeouts without
  // an answer, and the server keeps serving meanwhile.
  auto cut_off_after = [&](const std::string& bytes) {
    auto t0 = std::chrono::steady_clock::now();
    std::string reply = testing::RawExchange("127.0.0.1", intake.port(), bytes, 10s);
    EXPECT_EQ(reply, "");
    return std::chrono::steady_clock::now() - t0;
  };
  auto slow = std::async(std::launch::async, cut_off_after, "POST /github/webhook HTTP/1.1\r\nHost: x\r\n");
  auto truncated = std::async(std::launch::async, cut_off_after,
                              "POST /github/webhook HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n{\"a\":");
  HttpClient other("127.0.0.1", intake.port());
  EXPECT_EQ(other.Post("/github/webhook", Headers(p, run + "ok"), p.body).status, 202);
  for (auto took : {slow.get(), truncated.get()}) {
    EXPECT_GE(took, 450ms);
    EXPECT_LT(took, relay::testing::Within(500ms, 700ms));
  }

  std::string m = intake.Metrics();
  EXPECT_THAT(m, HasSubstr("relay_intake_webhooks_total{outcome=\"bad_signature\"} 3"));
  EXPECT_THAT(m, HasSubstr("relay_intake_webhooks_total{outcome=\"bad_headers\"} 2"));
  EXPECT_THAT(m, HasSubstr("relay_intake_webhooks_total{outcome=\"bad_body\"} 1"));
  EXPECT_THAT(m, HasSubstr("relay_http_responses_total{code=\"404\"} 1"));
  EXPECT_THAT(m, HasSubstr("relay_http_responses_total{code=\"405\"} 1"));
  EXPECT_THAT(m, HasSubstr("relay_http_connection_errors_total{reason=\"timeout\"} 2"));

  auto topic = TopicByDelivery(run);
  EXPECT_EQ(topic.size(), 1u);  // only the good one
  EXPECT_TRUE(topic.count(run + "ok"));
}

TEST_F(IntakeIT, TwentyFiveMegabytesIsAcceptedAndMoreIs413BeforeTheBodyIsSent) {
  Intake intake;  // default timeouts: a 25 MB upload takes a while under sanitizers
  ASSERT_NE(intake.port(), 0);
  std::string run = RunId();
  const Payload& p = corpus_[0];
  // 25 MB is GitHub's cap: a larger declared body is refused before it is sent.
  std::string big_header = "POST /github/webhook HTTP/1.1\r\nHost: x\r\nX-GitHub-Event: push\r\n"
                           "X-GitHub-Delivery: " + run + "big\r\nContent-Length: 26214401\r\n\r\n";
  EXPECT_THAT(testing::RawExchange("127.0.0.1", intake.port(), big_header, 5s), HasSubstr("HTTP/1.1 413"));
  // A 25 MB body itself (a real payload padded inside its JSON) is accepted.
  std::string large = p.body;
  large.insert(large.size() - 1, ",\"padding\":\"" + std::string(25 * 1024 * 1024 - large.size() - 20, 'x') + "\"");
  ASSERT_LE(large.size(), 25u * 1024 * 1024);
  auto lh = Headers(p, run + "large");
  lh["X-Hub-Signature-256"] = github::SignWebhook(Env("RELAY_IT_SECRET"), large);
  EXPECT_EQ(HttpClient("127.0.0.1", intake.port(), 60s).Post("/github/webhook", lh, large).status, 202);
  EXPECT_THAT(intake.Metrics(), HasSubstr("relay_http_responses_total{code=\"413\"} 1"));
  auto topic = TopicByDelivery(run);
  ASSERT_EQ(topic.size(), 1u);
  ASSERT_TRUE(topic.count(run + "large"));
  EXPECT_EQ(topic[run + "large"][0].body(), large);
}

TEST_F(IntakeIT, BrokerStoppedMidStreamEvery2xxIsDurableAndEveryOtherIs503) {
  Intake intake(std::map<std::string, std::string>{{"RELAY_KAFKA_DELIVERY_TIMEOUT", "2s"}});
  ASSERT_NE(intake.port(), 0);
  std::string run = RunId();
  WebhookStream stream(intake.port(), corpus_, run, 20s, /*stop_when_closed=*/false);

  ASSERT_TRUE(stream.WaitFor(202, 300, 60s));
  KafkaDev("stop");
  // Requests now wait for an ack that cannot come: they must end in 503.
  EXPECT_TRUE(stream.WaitFor(503, 8, 60s));
  // /readyz reports the outage (librdkafka notices within its stats interval).
  auto readyz_until = [&](int want) {
    int ready = 0;
    auto deadline = std::chrono::steady_clock::now() + 10s;
    while ((ready = HttpClient("127.0.0.1", intake.port(), 2s).Get("/readyz").status) != want &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(50ms);
    }
    return ready;
  };
  EXPECT_EQ(readyz_until(503), 503);
  int accepted_before = stream.Count(202);
  KafkaDev("restart");
  EXPECT_TRUE(stream.WaitFor(202, accepted_before + 300, 90s));
  stream.Stop();
  EXPECT_EQ(readyz_until(200), 200);

  auto status_by_id = stream.statuses();
  std::map<int, int> histogram;
  for (auto& [id, s] : status_by_id) histogram[s]++;
  for (auto& [s, n] : histogram) {
    EXPECT_TRUE(s == 202 || s == 503) << n << " requests answered " << s;
  }
  EXPECT_GE(histogram[503], 8);
  EXPECT_GE(histogram[202], accepted_before + 300) << "intake did not recover after the broker restart";

  // At-least-once under faults: an acknowledged id may appear twice only if
  // librdkafka re-sent it; it must never appear zero times.
  auto topic = TopicByDelivery(run);
  int missing = 0;
  for (auto& [id, s] : status_by_id) missing += s == 202 && !topic.count(id);
  EXPECT_EQ(missing, 0) << missing << " acknowledged deliveries are not in the topic";
  RecordProperty("accepted", histogram[202]);
  RecordProperty("unavailable", histogram[503]);
}

TEST_F(IntakeIT, SigtermDrainsInTwoPhasesAndNoRequestIsDropped) {
  Intake intake(std::map<std::string, std::string>{{"RELAY_HTTP_DRAIN_DELAY", "3s"}});
  ASSERT_NE(intake.port(), 0);
  std::string run = RunId();
  WebhookStream stream(intake.port(), corpus_, run, 10s, /*stop_when_closed=*/true);
  ASSERT_TRUE(stream.WaitFor(202, 200, 60s));
  intake.process().Signal(SIGTERM);
  // Phase 1: /readyz turns 503 (a balancer would take the instance out)...
  int ready = 200;
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while ((ready = HttpClient("127.0.0.1", intake.port(), 2s).Get("/readyz").status) == 200 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_EQ(ready, 503);
  // ...while requests are still served and made durable.
  int at_flip = stream.Count(202);
  // (20 in 2 s, inside the 3 s delay: a sanitizer build on a loaded
  // machine may not make 50 in one.)
  EXPECT_TRUE(stream.WaitFor(202, at_flip + 20, 2s)) << "intake stopped serving as soon as readiness went off";
  // The balancer has stopped sending; the drain completes and exits 0.
  stream.Stop();
  EXPECT_EQ(intake.process().Wait(30s), 0);
  // Every request sent ended with its answer, all 202, none dropped or
  // cut off, and every 202 is in the topic.
  auto statuses = stream.statuses();
  auto topic = TopicByDelivery(run);
  int missing = 0;
  for (auto& [id, s] : statuses) {
    EXPECT_EQ(s, 202) << id << " got " << s << " " << stream.error(id);
    missing += s == 202 && !topic.count(id);
  }
  EXPECT_EQ(missing, 0) << missing << " acknowledged deliveries are not in the topic";
}

TEST_F(IntakeIT, AKnownDeliveryIdWithAnotherBodyIsRecordedAsAConflict) {
  Intake intake;
  ASSERT_NE(intake.port(), 0);
  std::string run = RunId();
  HttpClient client("127.0.0.1", intake.port());
  // A body read from the topic, replayed under the id of another delivery
  // before GitHub's own (re)delivery of that id arrives.
  EXPECT_EQ(client.Post("/github/webhook", Headers(corpus_[1], run + "x"), corpus_[1].body).status, 202);
  auto genuine = client.Post("/github/webhook", Headers(corpus_[0], run + "x"), corpus_[0].body);
  EXPECT_EQ(genuine.status, 202);
  EXPECT_THAT(genuine.body, HasSubstr(R"("conflict":true)"));
  EXPECT_EQ(client.Post("/github/webhook", Headers(corpus_[0], run + "x"), corpus_[0].body).status, 200);
  auto topic = TopicByDelivery(run);
  ASSERT_EQ(topic[run + "x"].size(), 2u);
  std::set<std::string> bodies;
  for (const auto& r : topic[run + "x"]) {
    bodies.insert(r.body());
    auto digest = Sha256(r.body());
    EXPECT_EQ(r.body_sha256(), std::string(digest.begin(), digest.end()));
    for (const auto& h : r.headers()) EXPECT_NE(h.name(), "x-hub-signature-256") << "signature kept in the record";
  }
  EXPECT_EQ(bodies, (std::set<std::string>{corpus_[0].body, corpus_[1].body}));
  EXPECT_THAT(intake.Metrics(), HasSubstr("relay_intake_webhooks_total{outcome=\"conflict\"} 1"));
}

TEST_F(IntakeIT, AMissingTopicFailsReadinessWithTheReasonAndIsNotRetriedForever) {
  Intake intake(std::map<std::string, std::string>{{"RELAY_INTAKE_TOPIC", "it.no.such.topic"}});
  ASSERT_NE(intake.port(), 0);
  HttpClient client("127.0.0.1", intake.port());
  relay::testing::HttpResult ready;
  auto deadline = std::chrono::steady_clock::now() + 20s;
  do {
    ready = client.Get("/readyz");
    if (ready.body.find("does not exist") != std::string::npos) break;
    std::this_thread::sleep_for(50ms);
  } while (std::chrono::steady_clock::now() < deadline);
  EXPECT_EQ(ready.status, 503);
  EXPECT_THAT(ready.body, HasSubstr("topic: topic it.no.such.topic does not exist"));
  // A webhook gets a definite 500 with the reason, not "retry in 5 s".
  auto r = client.Post("/github/webhook", Headers(corpus_[0], RunId() + "nt"), corpus_[0].body);
  EXPECT_EQ(r.status, 500) << r.body;
  EXPECT_EQ(r.headers.count("retry-after"), 0u);
  EXPECT_THAT(r.body, HasSubstr("UNKNOWN_TOPIC"));
  EXPECT_THAT(client.Get("/readyz").body, HasSubstr("produce: Kafka refused a webhook record"));
}

TEST_F(IntakeIT, RefusesToStartWithoutASecretOrWithBadConfig) {
  Subprocess no_secret({Env("RELAY_IT_INTAKE_BIN")},
                       {{"RELAY_KAFKA_BOOTSTRAP", testing::FixtureBootstrap()}, {"RELAY_INTAKE_WEBHOOK_SECRETS", ""}},
                       Env("RELAY_IT_DIR") + "/intake-config.log");
  EXPECT_EQ(no_secret.Wait(10s), 2);
  Subprocess bad_timeout({Env("RELAY_IT_INTAKE_BIN")},
                         {{"RELAY_KAFKA_BOOTSTRAP", testing::FixtureBootstrap()},
                          {"RELAY_INTAKE_WEBHOOK_SECRETS", Env("RELAY_IT_SECRET")},
                          {"RELAY_HTTP_HEADER_TIMEOUT", "soon"}},
                         Env("RELAY_IT_DIR") + "/intake-config.log");
  EXPECT_EQ(bad_timeout.Wait(10s), 2);
  Subprocess typo({Env("RELAY_IT_INTAKE_BIN")},
                  {{"RELAY_KAFKA_BOOTSTRAP", testing::FixtureBootstrap()},
                   {"RELAY_INTAKE_WEBHOOK_SECRETS", Env("RELAY_IT_SECRET")},
                   {"RELAY_KAFKA_DELIVERY_TIMOUT", "1s"}},
                  Env("RELAY_IT_DIR") + "/intake-config.log");
  EXPECT_EQ(typo.Wait(10s), 2);
  // A port already taken: a clear start failure, exit 1, no crash.
  Intake first;
  ASSERT_NE(first.port(), 0);
  Subprocess clash({Env("RELAY_IT_INTAKE_BIN")},
                   {{"RELAY_KAFKA_BOOTSTRAP", testing::FixtureBootstrap()},
                    {"RELAY_INTAKE_WEBHOOK_SECRETS", Env("RELAY_IT_SECRET")},
                    {"RELAY_HTTP_LISTEN", "127.0.0.1:" + std::to_string(first.port())}},
                   Env("RELAY_IT_DIR") + "/intake-config.log");
  EXPECT_EQ(clash.Wait(15s), 1);
  std::string log = ReadFile(Env("RELAY_IT_DIR") + "/intake-config.log");
  EXPECT_THAT(log, HasSubstr("start failed"));
  EXPECT_THAT(log, HasSubstr("no webhook secret"));
  EXPECT_THAT(log, HasSubstr("RELAY_HTTP_HEADER_TIMEOUT"));
  EXPECT_THAT(log, HasSubstr("RELAY_KAFKA_DELIVERY_TIMOUT: unknown variable"));
  EXPECT_THAT(log, ::testing::Not(HasSubstr(Env("RELAY_IT_SECRET"))));  // secrets never logged
}

// relay's Kafka clients authenticate when configured (kafka.security_protocol,
// libs/kafka/security.h): the fixture broker's SASL/PLAIN listener
// (tools/kafka/kafka-dev) takes intake's records with the right password;
// with a wrong one, or none, nothing is acknowledged and /readyz says so.
TEST_F(IntakeIT, KafkaSaslTakesRecordsOnlyWithTheRightPassword) {
  std::string kdir = Env("RELAY_IT_KAFKA_DIR");
  std::string sasl = ReadFile(kdir + "/sasl-bootstrap");
  while (!sasl.empty() && sasl.back() == '\n') sasl.pop_back();
  ASSERT_FALSE(sasl.empty()) << kdir << " holds a broker formatted before kafka-dev had a SASL listener: remove it";
  std::string wrong = Env("RELAY_IT_DIR") + "/wrong-sasl-password";
  std::ofstream(wrong) << "not-the-password\n";
  auto sasl_env = [&](const std::string& password_file) {
    return std::map<std::string, std::string>{{"RELAY_KAFKA_BOOTSTRAP", sasl},
                                              {"RELAY_KAFKA_SECURITY_PROTOCOL", "sasl_plaintext"},
                                              {"RELAY_KAFKA_SASL_MECHANISM", "PLAIN"},
                                              {"RELAY_KAFKA_SASL_USERNAME", "relay"},
                                              {"RELAY_KAFKA_SASL_PASSWORD_FILE", password_file},
                                              {"RELAY_KAFKA_DELIVERY_TIMEOUT", "3s"}};
  };
  std::string run = RunId();
  {
    Intake intake(sasl_env(kdir + "/sasl-password"));
    ASSERT_NE(intake.port(), 0);
    HttpClient client("127.0.0.1", intake.port(), 10s);
    // Ready once its first topic check (over SASL too) has passed.
    relay::testing::HttpResult ready;
    auto deadline = std::chrono::steady_clock::now() + 20s;
    while ((ready = client.Get("/readyz")).status != 200 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(100ms);
    }
    EXPECT_EQ(ready.status, 200) << ready.body;
    auto r = client.Post("/github/webhook", Headers(corpus_[0], run + "ok"), corpus_[0].body);
    EXPECT_EQ(r.status, 202) << r.body << r.error;
  }
  auto refused = [&](std::map<std::string, std::string> env, const std::string& id) {
    Intake intake(std::move(env));
    ASSERT_NE(intake.port(), 0);
    HttpClient client("127.0.0.1", intake.port(), 10s);
    auto r = client.Post("/github/webhook", Headers(corpus_[0], run + id), corpus_[0].body);
    EXPECT_EQ(r.status, 503) << id << ": " << r.body << r.error;
    EXPECT_NE(client.Get("/readyz").status, 200) << id;
  };
  refused(sasl_env(wrong), "wrong");
  refused({{"RELAY_KAFKA_BOOTSTRAP", sasl}, {"RELAY_KAFKA_DELIVERY_TIMEOUT", "3s"}}, "plaintext");
  auto topic = TopicByDelivery(run);
  EXPECT_EQ(topic.size(), 1u);
  EXPECT_EQ(topic.count(run + "ok"), 1u);
  // The password is never logged, not even when Kafka refuses it.
  std::string log = ReadFile(Env("RELAY_IT_DIR") + "/intake.log");
  EXPECT_THAT(log, ::testing::Not(HasSubstr(ReadFile(kdir + "/sasl-password").substr(0, 32))));
  EXPECT_THAT(log, ::testing::Not(HasSubstr("not-the-password")));
}

TEST_F(IntakeIT, ShippedExampleConfigStartsTheService) {
  std::string secrets = Env("RELAY_IT_DIR") + "/example-secrets";
  std::ofstream(secrets) << "# rotation: old and new\n" << Env("RELAY_IT_SECRET") << "\nanother-secret-0123456789\n";
  std::string port_file = Env("RELAY_IT_DIR") + "/example.port";
  std::remove(port_file.c_str());
  Subprocess intake({Env("RELAY_IT_INTAKE_BIN"), "--config", Env("RELAY_ROOT") + "/deploy/config/intake.example.yaml",
                     "--port-file", port_file},
                    {{"RELAY_HTTP_LISTEN", "127.0.0.1:0"},
                     {"RELAY_KAFKA_BOOTSTRAP", testing::FixtureBootstrap()},
                     {"RELAY_INTAKE_WEBHOOK_SECRETS_FILE", secrets}},
                    Env("RELAY_IT_DIR") + "/intake-example.log");
  ASSERT_TRUE(testing::WaitForFile(port_file, 20s)) << ReadFile(Env("RELAY_IT_DIR") + "/intake-example.log");
  HttpClient client("127.0.0.1", static_cast<uint16_t>(std::stoi(ReadFile(port_file))));
  EXPECT_EQ(client.Post("/github/webhook", Headers(corpus_[0], RunId() + "example"), corpus_[0].body).status, 202);
  intake.Signal(SIGTERM);
  EXPECT_EQ(intake.Wait(30s), 0);
}

}  // namespace
}  // namespace relay
