// The service host with a small test service: configuration errors all at
// once, readiness naming every failing check, and the drain sequence
// (readiness off while still serving, then the listener, then requests in
// flight, then the service's own drain). Loopback sockets only.
#include "relay/service/host.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <mutex>
#include <thread>

#include "support/http_client.h"
#include "support/timing.h"

namespace relay::service {
namespace {

namespace bhttp = boost::beast::http;
using relay::testing::HttpClient;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

// What the test service saw, in order.
struct Journal {
  std::mutex mu;
  std::vector<std::string> events;
  std::atomic<bool> healthy{true};
  std::atomic<int> ticks{0};
  std::vector<http::Responder> held;
  void Add(std::string e) {
    std::lock_guard lock(mu);
    events.push_back(std::move(e));
  }
};

class DemoService final : public Service {
 public:
  explicit DemoService(Journal* journal) : journal_(journal) {}
  bool Drain(std::chrono::milliseconds) override {
    journal_->Add("service drain");
    return true;
  }

 private:
  Journal* journal_;
};

Definition Demo(Journal* journal) {
  return {"relay-demo", [journal](Config& config, const CommonSettings&) -> absl::StatusOr<Starter> {
            std::string greeting = config.String("demo.greeting", "hello");
            if (greeting == "refuse") return absl::InvalidArgumentError("demo.greeting: refused");
            return Starter([journal, greeting](Runtime& rt) -> absl::StatusOr<std::unique_ptr<Service>> {
              rt.router().Add(bhttp::verb::post, "/greet", [greeting](http::Request&&, http::Responder r) {
                r.Send(http::MakeResponse(200, greeting, "text/plain"));
              });
              rt.router().Add(bhttp::verb::post, "/hold", [journal](http::Request&&, http::Responder r) {
                std::lock_guard lock(journal->mu);
                journal->held.push_back(std::move(r));
              });
              rt.AddReadinessCheck("downstream", [journal] {
                return journal->healthy ? absl::OkStatus() : absl::UnavailableError("downstream is down");
              });
              rt.AddReadinessCheck("always", [] { return absl::OkStatus(); });
              rt.Every(20ms, [journal] { ++journal->ticks; });
              return std::make_unique<DemoService>(journal);
            });
          }};
}

Config MakeConfig(std::map<std::string, std::string> env) {
  env.emplace("RELAY_HTTP_LISTEN", "127.0.0.1:0");
  auto config = Config::Load("", std::move(env));
  EXPECT_TRUE(config.ok());
  return std::move(*config);
}

TEST(HostTest, EveryConfigurationErrorIsReportedAtOnce) {
  Journal journal;
  auto host = Host::Start(Demo(&journal), MakeConfig({{"RELAY_DEMO_GREETING", "refuse"},
                                                      {"RELAY_HTTP_DRAIN_DELAY", "1year"},
                                                      {"RELAY_HTTP_THREADS", "0"},
                                                      {"RELAY_HTTP_IDEL_TIMEOUT", "5s"}}));
  ASSERT_FALSE(host.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(host.status()));
  std::string message(host.status().message());
  EXPECT_THAT(message, HasSubstr("demo.greeting: refused"));
  EXPECT_THAT(message, HasSubstr("RELAY_HTTP_DRAIN_DELAY"));
  EXPECT_THAT(message, HasSubstr("RELAY_HTTP_THREADS"));
  EXPECT_THAT(message, HasSubstr("RELAY_HTTP_IDEL_TIMEOUT: unknown variable"));
}

TEST(HostTest, AServiceThatReadsAKeyItDidNotDeclareIsRefused) {
  // The demo under a declared program's name: relay-intake's
  // config-keys.txt has no demo.greeting.
  Journal journal;
  Definition demo = Demo(&journal);
  demo.name = "relay-intake";
  auto host = Host::Start(std::move(demo), MakeConfig({}));
  ASSERT_FALSE(host.ok());
  EXPECT_THAT(std::string(host.status().message()),
              HasSubstr("demo.greeting (RELAY_DEMO_GREETING): read by relay-intake but not declared in its config-keys.txt"));
}

TEST(HostTest, EachDeclarationIsInTheSuitesKeys) {
  const auto& declared = DeclaredKeys();
  for (const char* program : {"", "relay-intake", "relay-dispatch", "relay-collector", "relay-stats", "relay-lifecycle"}) {
    ASSERT_TRUE(declared.count(program)) << "no config-keys.txt for '" << program << "'";
    EXPECT_FALSE(declared.at(program).empty()) << program;
    for (const auto& key : declared.at(program)) EXPECT_TRUE(SuiteKeys().count(key)) << key;
  }
  EXPECT_TRUE(declared.at("").count("http.listen"));
  EXPECT_TRUE(declared.at("relay-dispatch").count("dispatch.batch_linger"));
}

TEST(HostTest, ADrainThatCannotFinishRequestsInFlightIsRefusedOrReportedAsUnclean) {
  Journal journal;
  // Zero would cut off every request in flight; a handler deadline past the
  // drain's would cut a held request off unanswered.
  struct Refusal {
    const char* key;
    const char* value;
    const char* reason;
  };
  for (const Refusal& r : {Refusal{"RELAY_HTTP_DRAIN_TIMEOUT", "0s", "RELAY_HTTP_DRAIN_TIMEOUT"},
                           Refusal{"RELAY_HTTP_HANDLER_TIMEOUT", "25s", "must not exceed http.drain_timeout"}}) {
    auto refused = Host::Start(Demo(&journal), MakeConfig({{r.key, r.value}}));
    ASSERT_FALSE(refused.ok()) << r.key;
    EXPECT_THAT(std::string(refused.status().message()), HasSubstr(r.reason));
  }
  // A body still arriving at the drain deadline (its client stalled) is cut
  // off: Shutdown says so instead of reporting a clean drain.
  auto host = Host::Start(Demo(&journal), MakeConfig({{"RELAY_HTTP_DRAIN_DELAY", "0s"},
                                                      {"RELAY_HTTP_DRAIN_TIMEOUT", "1s"},
                                                      {"RELAY_HTTP_HANDLER_TIMEOUT", "1s"}}));
  ASSERT_TRUE(host.ok()) << host.status();
  boost::asio::io_context ioc;
  boost::asio::ip::tcp::socket stalled(ioc);
  stalled.connect({boost::asio::ip::make_address("127.0.0.1"), (*host)->port()});
  std::string partial = "POST /greet HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nonly ten b";
  boost::asio::write(stalled, boost::asio::buffer(partial));
  // Its 100 bytes are reserved once the server has read the headers.
  HttpClient metrics("127.0.0.1", (*host)->port());
  auto reading = [&] { return metrics.Get("/metrics").body.find("relay_http_body_bytes_in_flight 100") != std::string::npos; };
  ASSERT_TRUE(relay::testing::WaitFor(reading, 5s));
  auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE((*host)->Shutdown());
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_GE(took, 1s);
  EXPECT_LT(took, relay::testing::Within(1s, 2s)) << "the drain did not stop at its deadline";
}

TEST(HostTest, ReadyzNamesEachFailingCheck) {
  Journal journal;
  auto host = Host::Start(Demo(&journal), MakeConfig({{"RELAY_HTTP_DRAIN_DELAY", "0s"}}));
  ASSERT_TRUE(host.ok()) << host.status();
  HttpClient client("127.0.0.1", (*host)->port());
  EXPECT_EQ(client.Get("/readyz").status, 200);
  EXPECT_EQ(client.Get("/healthz").status, 200);
  journal.healthy = false;
  auto r = client.Get("/readyz");
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(r.body, "not ready: downstream: downstream is down\n");
  EXPECT_THAT(client.Get("/metrics").body, HasSubstr("relay_service_ready 0"));
  journal.healthy = true;
  EXPECT_EQ(client.Get("/readyz").status, 200);
  // Periodic tasks run until shutdown, and not after.
  relay::testing::WaitFor([&] { return journal.ticks >= 3; }, 5s);
  EXPECT_GE(journal.ticks, 3);
  EXPECT_TRUE((*host)->Shutdown());
  int after = journal.ticks;
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(journal.ticks, after);
}

TEST(HostTest, DrainTurnsReadinessOffWhileServingThenFinishesInFlightThenDrainsTheService) {
  Journal journal;
  auto host = Host::Start(Demo(&journal), MakeConfig({{"RELAY_HTTP_DRAIN_DELAY", "800ms"},
                                                      {"RELAY_HTTP_DRAIN_TIMEOUT", "10s"},
                                                      {"RELAY_HTTP_HANDLER_TIMEOUT", "10s"}}));
  ASSERT_TRUE(host.ok()) << host.status();
  uint16_t port = (*host)->port();
  // A request the service holds across the whole drain.
  auto in_flight = std::async(std::launch::async, [port] { return HttpClient("127.0.0.1", port).Post("/hold", {}, ""); });
  auto held = [&] {
    std::lock_guard lock(journal.mu);
    return journal.held.size();
  };
  relay::testing::WaitFor([&] { return held() > 0; }, 10s, 2ms);
  ASSERT_EQ(held(), 1u);
  HttpClient keep_alive("127.0.0.1", port);
  ASSERT_EQ(keep_alive.Post("/greet", {}, "").status, 200);

  auto signalled = std::chrono::steady_clock::now();
  auto shutdown = std::async(std::launch::async, [&] { return (*host)->Shutdown(); });
  // Phase 1: /readyz says draining, and requests are still served, on open
  // connections and new ones alike.
  HttpClient probe("127.0.0.1", port);
  int ready = 0;
  for (int i = 0; i < 100 && (ready = probe.Get("/readyz").status) == 200; ++i) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(ready, 503);
  EXPECT_THAT(probe.Get("/readyz").body, HasSubstr("draining"));
  EXPECT_EQ(keep_alive.Post("/greet", {}, "").status, 200);
  EXPECT_EQ(HttpClient("127.0.0.1", port).Post("/greet", {}, "").status, 200);
  // Phase 2: after the delay the listener is closed; the held request is
  // still waiting, and the service has not been drained yet.
  relay::testing::WaitFor([&] { return HttpClient("127.0.0.1", port, 1s).Get("/healthz").status == 0; }, 5s, 10ms);
  auto closed_after = std::chrono::steady_clock::now() - signalled;
  EXPECT_GE(closed_after, 800ms) << "the listener closed before the drain delay was over";
  EXPECT_LT(closed_after, relay::testing::Within(800ms, 1200ms)) << "the listener did not close after the drain delay";
  {
    std::lock_guard lock(journal.mu);
    EXPECT_TRUE(journal.events.empty()) << "the service drained while a request was in flight";
    journal.events.push_back("request answered");
    journal.held[0].Send(http::MakeResponse(202, "done", "text/plain"));
    journal.held.clear();
  }
  auto r = in_flight.get();
  EXPECT_EQ(r.status, 202);
  EXPECT_EQ(r.headers["connection"], "close");
  // Phase 3: only then the service's own drain.
  EXPECT_TRUE(shutdown.get());
  std::lock_guard lock(journal.mu);
  EXPECT_THAT(journal.events, ::testing::ElementsAre("request answered", "service drain"));
}

}  // namespace
}  // namespace relay::service

namespace relay::service {
namespace {

// A part of the service that stops for good (a consumer loop that ended)
// must not leave a process that looks alive: /healthz and /readyz answer
// 503 naming it, and Main's handler is called once to start the drain.
TEST(HostTest, AFatalPartMakesHealthzFailAndAsksForTheExit) {
  Journal journal;
  auto host = Host::Start(Demo(&journal), MakeConfig({{"RELAY_HTTP_DRAIN_DELAY", "0s"}}));
  ASSERT_TRUE(host.ok()) << host.status();
  HttpClient client("127.0.0.1", (*host)->port());
  EXPECT_EQ(client.Get("/healthz").status, 200);
  std::atomic<int> asked{0};
  (*host)->OnFatal([&] { ++asked; });
  std::thread([&] { (*host)->runtime().Fatal("consumer", absl::AbortedError("fatal client error: FENCED")); }).join();
  (*host)->runtime().Fatal("consumer", absl::AbortedError("again"));
  auto health = client.Get("/healthz");
  EXPECT_EQ(health.status, 503);
  EXPECT_THAT(health.body, HasSubstr("consumer stopped: fatal client error: FENCED"));
  EXPECT_EQ(client.Get("/readyz").status, 503);
  EXPECT_EQ(asked.load(), 1);
  EXPECT_FALSE((*host)->Live().ok());
  // A handler set after the fact is still called (Main sets it once started).
  std::atomic<int> late{0};
  (*host)->OnFatal([&] { ++late; });
  EXPECT_EQ(late.load(), 1);
}

}  // namespace
}  // namespace relay::service

namespace relay::service {
namespace {

// http.metrics_listen: /metrics on a listener of its own and nowhere else,
// so a NetworkPolicy can open the service's port to readers and the
// metrics port to the scraper alone. Probes stay on the service's port.
TEST(HostTest, MetricsListenServesMetricsThereOnly) {
  Journal journal;
  auto host = Host::Start(Demo(&journal), MakeConfig({{"RELAY_HTTP_DRAIN_DELAY", "0s"},
                                                      {"RELAY_HTTP_METRICS_LISTEN", "127.0.0.1:0"}}));
  ASSERT_TRUE(host.ok()) << host.status();
  ASSERT_NE((*host)->metrics_port(), 0);
  ASSERT_NE((*host)->metrics_port(), (*host)->port());
  HttpClient service("127.0.0.1", (*host)->port());
  HttpClient scraper("127.0.0.1", (*host)->metrics_port());
  EXPECT_EQ(service.Get("/metrics").status, 404) << "/metrics must not be served on the service's port";
  EXPECT_EQ(service.Get("/readyz").status, 200);
  EXPECT_EQ(service.Get("/healthz").status, 200);
  auto scrape = scraper.Get("/metrics");
  EXPECT_EQ(scrape.status, 200);
  EXPECT_THAT(scrape.body, HasSubstr("relay_service_ready"));
  EXPECT_EQ(scraper.Get("/readyz").status, 404) << "the metrics port serves /metrics alone";
  EXPECT_EQ(HttpClient("127.0.0.1", (*host)->metrics_port()).Post("/greet", {}, "").status, 404);
  EXPECT_TRUE((*host)->Shutdown());

  // Without the setting, everything on the one port, as before.
  auto plain = Host::Start(Demo(&journal), MakeConfig({{"RELAY_HTTP_DRAIN_DELAY", "0s"}}));
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ((*plain)->metrics_port(), 0);
  EXPECT_EQ(HttpClient("127.0.0.1", (*plain)->port()).Get("/metrics").status, 200);

  auto bad = Host::Start(Demo(&journal), MakeConfig({{"RELAY_HTTP_METRICS_LISTEN", "nowhere"}}));
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("RELAY_HTTP_METRICS_LISTEN"));
}

}  // namespace
}  // namespace relay::service
