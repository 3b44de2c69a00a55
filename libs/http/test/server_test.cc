// The HTTP server over real loopback sockets (no broker involved).
#include "relay/http/server.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "prometheus/text_serializer.h"
#include "relay/http/router.h"
#include "support/http_client.h"
#include "support/timing.h"

namespace relay::http {
namespace {

namespace bhttp = boost::beast::http;
using relay::testing::HttpClient;
using relay::testing::RawExchange;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

class ServerTest : public ::testing::Test {
 protected:
  void StartServer(ServerOptions options = {}) {
    router_.Add(bhttp::verb::post, "/echo", [](Request&& req, Responder r) {
      r.Send(MakeResponse(200, req.body(), "text/plain"));
    });
    router_.Add(bhttp::verb::post, "/slow", [this](Request&&, Responder r) {
      // Answer later from another thread, as a Kafka delivery callback would.
      slow_started_.set_value();
      std::thread([r = std::move(r)]() mutable {
        std::this_thread::sleep_for(300ms);
        r.Send(MakeResponse(202, "late", "text/plain"));
      }).detach();
    });
    router_.Add(bhttp::verb::post, "/held", [this](Request&& req, Responder r) {
      // Held until the test answers them all at once from its own thread,
      // as one Kafka delivery report completes a burst of requests.
      std::lock_guard lock(held_mu_);
      held_.emplace_back(req.body(), std::move(r));
      held_cv_.notify_all();
    });
    router_.Add(bhttp::verb::post, "/busy", [this](Request&&, Responder r) {
      // Blocks its loop, as CPU-heavy work on a large body would.
      busy_started_.set_value();
      std::this_thread::sleep_for(1500ms);
      r.Send(MakeResponse(200, "done", "text/plain"));
    });
    router_.Add(bhttp::verb::post, "/small", [](Request&& req, Responder r) {
      r.Send(MakeResponse(200, req.body(), "text/plain"));
    }, /*body_limit=*/10);
    router_.Add(bhttp::verb::post, "/big", [](Request&& req, Responder r) {
      r.Send(MakeResponse(200, std::to_string(req.body().size()), "text/plain"));
    }, /*body_limit=*/1024 * 1024);
    // Streamed: counts bytes and pieces; "deny" in the query refuses on
    // the header, a body containing "!" fails mid-upload.
    router_.AddStream(bhttp::verb::post, "/upload", [this](const RequestHeader& h) -> std::variant<Response, std::shared_ptr<BodyStream>> {
      if (std::string_view(h.target()).find("deny") != std::string_view::npos) {
        return MakeResponse(401, R"({"error":"who are you"})");
      }
      struct Counter : BodyStream {
        ServerTest* test;
        int64_t bytes = 0, pieces = 0;
        absl::Status OnData(std::string_view data) override {
          if (data.find('!') != std::string_view::npos) return absl::InvalidArgumentError("a '!' at byte " + std::to_string(bytes));
          bytes += static_cast<int64_t>(data.size());
          ++pieces;
          test->largest_piece_ = std::max<int64_t>(test->largest_piece_, static_cast<int64_t>(data.size()));
          return absl::OkStatus();
        }
        void OnEnd(Responder r) override { r.Send(MakeResponse(200, std::to_string(bytes), "text/plain")); }
      };
      auto c = std::make_shared<Counter>();
      c->test = this;
      return c;
    }, /*body_limit=*/64 * 1024 * 1024);
    AddOpsRoutes(router_, registry_, [] { return absl::OkStatus(); });
    options.body_limit_for = router_.AsBodyLimitFunction();
    options.stream_for = router_.AsStreamFunction();
    auto server = Server::Start(options, router_.AsHandler(), &registry_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }
  std::string Metrics() { return prometheus::TextSerializer().Serialize(registry_.Collect()); }
  std::atomic<int64_t> largest_piece_{0};
  // The metrics once they contain `want` (a server thread may count just
  // after the client saw the effect), or as they are after 2 s.
  std::string MetricsWith(const std::string& want) {
    auto deadline = std::chrono::steady_clock::now() + 2s;
    std::string m = Metrics();
    while (m.find(want) == std::string::npos && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(5ms);
      m = Metrics();
    }
    return m;
  }

  prometheus::Registry registry_;
  Router router_;
  std::promise<void> slow_started_;
  std::promise<void> busy_started_;
  std::mutex held_mu_;
  std::condition_variable held_cv_;
  std::unique_ptr<Server> server_;
  // After server_: responders still held when a test fails are dropped
  // (answering 500) while the server is alive.
  std::vector<std::pair<std::string, Responder>> held_;
};

// Milliseconds until the server closes a connection that sent `bytes` and
// then nothing, or -1 if it stays open for `timeout`.
int64_t MillisUntilClosed(uint16_t port, const std::string& bytes, std::chrono::milliseconds timeout,
                          std::string* received = nullptr) {
  auto start = std::chrono::steady_clock::now();
  std::string got = RawExchange("127.0.0.1", port, bytes, timeout);
  auto took = std::chrono::steady_clock::now() - start;
  if (received) *received = got;
  if (took >= timeout - 50ms) return -1;
  return std::chrono::duration_cast<std::chrono::milliseconds>(took).count();
}

TEST_F(ServerTest, KeepAliveServesManyRequestsOnOneConnection) {
  StartServer();
  HttpClient client("127.0.0.1", server_->port());
  for (int i = 0; i < 20; ++i) {
    auto r = client.Post("/echo", {}, "hello " + std::to_string(i));
    ASSERT_EQ(r.status, 200) << r.error;
    EXPECT_EQ(r.body, "hello " + std::to_string(i));
  }
  EXPECT_THAT(MetricsWith("relay_http_open_connections 1"), HasSubstr("relay_http_open_connections 1"));
}

TEST_F(ServerTest, AStreamedRouteTakesBodiesPastTheServerLimitPieceByPiece) {
  ServerOptions options;
  options.body_limit = 1024 * 1024;  // the largest ordinary route
  options.max_body_bytes_in_flight = 1024 * 1024;
  StartServer(options);
  HttpClient client("127.0.0.1", server_->port());
  std::string body(20 * 1024 * 1024, 'x');  // 20x the server limit and the body budget
  auto r = client.Post("/upload", {}, body);
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, std::to_string(body.size()));
  EXPECT_LE(largest_piece_.load(), 64 * 1024) << "handed over in pieces, never whole";
  // The connection stays usable for ordinary requests.
  EXPECT_EQ(client.Post("/echo", {}, "after").body, "after");
  // Chunked.
  std::string chunked = "POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                        "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";
  EXPECT_THAT(RawExchange("127.0.0.1", server_->port(), chunked, 5s), HasSubstr("\r\n\r\n11"));
  // An empty upload after a full one on the same connection is empty: the
  // previous body's bytes must not be handed over again.
  EXPECT_EQ(client.Post("/upload", {}, "").body, "0");
  // Refused on its header, before the body.
  EXPECT_EQ(HttpClient("127.0.0.1", server_->port()).Post("/upload?deny=1", {}, body).status, 401);
  // Failed mid-upload: the stream's status and reason.
  auto bad = HttpClient("127.0.0.1", server_->port()).Post("/upload", {}, std::string(200000, 'x') + "!");
  EXPECT_EQ(bad.status, 400);
  EXPECT_THAT(bad.body, HasSubstr("a '!' at byte"));
  // Past the route's own limit: 413 before reading.
  std::string huge = "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n";
  EXPECT_THAT(RawExchange("127.0.0.1", server_->port(), huge, 5s), HasSubstr("413"));
}

TEST_F(ServerTest, UnknownPathIs404AndWrongMethodIs405WithAllow) {
  StartServer();
  HttpClient client("127.0.0.1", server_->port());
  EXPECT_EQ(client.Post("/nope", {}, "x").status, 404);
  auto r = client.Get("/echo");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.headers["allow"], "POST");
  EXPECT_EQ(client.Get("/healthz").status, 200);
  EXPECT_EQ(client.Get("/readyz").status, 200);
  EXPECT_THAT(client.Get("/metrics").body, HasSubstr("relay_http_responses_total{code=\"404\"} 1"));
}

TEST_F(ServerTest, DeclaredBodyOverLimitIs413BeforeTheBodyIsRead) {
  ServerOptions options;
  options.body_limit = 1024;
  StartServer(options);
  // Only the headers are sent: the 413 must come without waiting for a body.
  std::string reply = RawExchange("127.0.0.1", server_->port(),
                                  "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5000000\r\n\r\n", 5s);
  EXPECT_THAT(reply, HasSubstr("HTTP/1.1 413"));
  HttpClient client("127.0.0.1", server_->port());
  EXPECT_EQ(client.Post("/echo", {}, std::string(1024, 'a')).status, 200);
  EXPECT_EQ(client.Post("/echo", {}, std::string(1025, 'a')).status, 413);
  EXPECT_THAT(MetricsWith("relay_http_connection_errors_total{reason=\"too_large\"} 2"), HasSubstr("relay_http_connection_errors_total{reason=\"too_large\"} 2"));
}

TEST_F(ServerTest, SlowHeaderClientIsCutOffAndOthersAreServedMeanwhile) {
  ServerOptions options;
  options.header_timeout = 300ms;
  StartServer(options);
  auto slow = std::async(std::launch::async, [&] {
    return MillisUntilClosed(server_->port(), "POST /echo HTTP/1.1\r\nHost: x\r\n", 10s);
  });
  HttpClient client("127.0.0.1", server_->port());
  EXPECT_EQ(client.Post("/echo", {}, "still served").status, 200);
  int64_t ms = slow.get();  // closed without a response, at the header timeout
  EXPECT_GE(ms, 250);
  EXPECT_LT(ms, relay::testing::Within(300ms, 500ms).count());
  EXPECT_THAT(MetricsWith("relay_http_connection_errors_total{reason=\"timeout\"} 1"), HasSubstr("relay_http_connection_errors_total{reason=\"timeout\"} 1"));
}

TEST_F(ServerTest, TruncatedBodyTimesOutWithoutAResponse) {
  ServerOptions options;
  options.body_timeout = 300ms;
  StartServer(options);
  std::string reply;
  int64_t ms = MillisUntilClosed(server_->port(),
                                 "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nonly-ten!!", 10s, &reply);
  EXPECT_EQ(reply, "");
  EXPECT_GE(ms, 250);
  EXPECT_LT(ms, relay::testing::Within(300ms, 500ms).count());
  EXPECT_THAT(MetricsWith("relay_http_connection_errors_total{reason=\"timeout\"} 1"), HasSubstr("relay_http_connection_errors_total{reason=\"timeout\"} 1"));
}

TEST_F(ServerTest, MalformedRequestIs400) {
  StartServer();
  std::string reply = RawExchange("127.0.0.1", server_->port(), "GARBAGE\x01 / HTTP/9\r\n\r\n", 5s);
  EXPECT_THAT(reply, HasSubstr("HTTP/1.1 400"));
}

// Chunked bodies' framing is bounded too: a huge trailer field or chunk
// extension (Beast applies no header limit there, and a field of 64 KiB
// makes it throw) is refused, the server lives on, and what was buffered
// for it is bounded. Also on a route with a large body limit.
TEST_F(ServerTest, HugeChunkTrailersAndExtensionsAreRefusedAndTheServerLivesOn) {
  StartServer();
  for (const std::string path : {"/echo", "/big", "/upload"}) {
    std::string trailer = "POST " + path + " HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                          "2\r\nhi\r\n0\r\nX: " + std::string(70'000, 'a') + "\r\n\r\n";
    std::string reply = RawExchange("127.0.0.1", server_->port(), trailer, 5s);
    EXPECT_THAT(reply, ::testing::Not(HasSubstr("HTTP/1.1 200"))) << path;
    std::string extension = "POST " + path + " HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                            "2;" + std::string(200'000, 'e') + "\r\nhi\r\n0\r\n\r\n";
    reply = RawExchange("127.0.0.1", server_->port(), extension, 5s);
    EXPECT_THAT(reply, ::testing::Not(HasSubstr("HTTP/1.1 200"))) << path;
    auto ok = HttpClient("127.0.0.1", server_->port(), 5s).Post(path == "/upload" ? "/upload" : "/echo", {}, "ok");
    EXPECT_EQ(ok.status, 200) << "the server still serves, after " << path;
  }
  // A small trailer within the limits is fine.
  std::string reply = RawExchange("127.0.0.1", server_->port(),
                                  "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                                  "Connection: close\r\n\r\n2\r\nhi\r\n0\r\nX-Trailer: 1\r\n\r\n",
                                  5s);
  EXPECT_THAT(reply, HasSubstr("HTTP/1.1 200"));
}

TEST_F(ServerTest, ExpectContinueIsAnswered) {
  StartServer();
  std::string reply = RawExchange("127.0.0.1", server_->port(),
                                  "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
                                  "Expect: 100-continue\r\nConnection: close\r\n\r\nhi",
                                  5s);
  EXPECT_THAT(reply, HasSubstr("HTTP/1.1 100 Continue"));
  EXPECT_THAT(reply, HasSubstr("HTTP/1.1 200"));
}

TEST_F(ServerTest, BurstOfResponsesFromAnotherThreadEachReachTheirOwnConnection) {
  ServerOptions options;
  options.threads = 3;  // connections spread over several loops
  StartServer(options);
  constexpr int kClients = 40;
  std::vector<std::future<relay::testing::HttpResult>> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.push_back(std::async(std::launch::async, [port = server_->port(), i] {
      HttpClient client("127.0.0.1", port, 10s);
      return client.Post("/held", {}, "request-" + std::to_string(i));
    }));
  }
  {
    std::unique_lock lock(held_mu_);
    ASSERT_TRUE(held_cv_.wait_for(lock, 10s, [&] { return held_.size() == kClients; })) << held_.size();
  }
  // One foreign thread answers every request back to back.
  std::thread([this] {
    std::lock_guard lock(held_mu_);
    for (auto& [body, responder] : held_) responder.Send(MakeResponse(202, "answer-to-" + body, "text/plain"));
  }).join();
  for (int i = 0; i < kClients; ++i) {
    auto r = clients[i].get();
    EXPECT_EQ(r.status, 202) << r.error;
    EXPECT_EQ(r.body, "answer-to-request-" + std::to_string(i));
  }
  EXPECT_THAT(MetricsWith("relay_http_responses_total{code=\"202\"} 40"), HasSubstr("relay_http_responses_total{code=\"202\"} 40"));
}

TEST_F(ServerTest, ABlockedLoopDoesNotDelayNewConnectionsOnOtherLoops) {
  ServerOptions options;
  options.threads = 2;
  StartServer(options);
  auto busy = std::async(std::launch::async, [port = server_->port()] {
    HttpClient client("127.0.0.1", port, 10s);
    return client.Post("/busy", {}, "x");
  });
  busy_started_.get_future().wait();
  // The next connection is bound for the other loop; accepting it must not
  // wait for the blocked one.
  auto started = std::chrono::steady_clock::now();
  HttpClient other("127.0.0.1", server_->port(), 10s);
  EXPECT_EQ(other.Post("/echo", {}, "quick").status, 200);
  EXPECT_LT(std::chrono::steady_clock::now() - started, relay::testing::Within(0ms, 1000ms));
  EXPECT_EQ(busy.get().status, 200);
}

TEST_F(ServerTest, ResponderDroppedOnAnotherThreadAnswers500AndTheConnectionStaysUsable) {
  StartServer();
  HttpClient client("127.0.0.1", server_->port(), 10s);
  for (int round = 0; round < 10; ++round) {
    auto pending = std::async(std::launch::async, [&] { return client.Post("/held", {}, "x"); });
    {
      std::unique_lock lock(held_mu_);
      ASSERT_TRUE(held_cv_.wait_for(lock, 10s, [&] { return held_.size() == 1; }));
    }
    std::thread([&, round] {
      std::lock_guard lock(held_mu_);
      if (round % 2 == 0) held_[0].second.Send(MakeResponse(202, "ok", "text/plain"));
      held_.clear();  // unsent on odd rounds: the destructor answers 500
    }).join();
    EXPECT_EQ(pending.get().status, round % 2 == 0 ? 202 : 500);
    EXPECT_EQ(client.Post("/echo", {}, "again").status, 200);  // same keep-alive connection
  }
}

TEST_F(ServerTest, ShutdownFinishesRequestsInFlightThenRefusesNewConnections) {
  StartServer();
  uint16_t port = server_->port();
  HttpClient idle("127.0.0.1", port);
  ASSERT_EQ(idle.Post("/echo", {}, "x").status, 200);  // an idle keep-alive connection
  auto in_flight = std::async(std::launch::async, [port] {
    HttpClient client("127.0.0.1", port);
    return client.Post("/slow", {}, "x");
  });
  slow_started_.get_future().wait();
  server_->Shutdown(5s);
  auto r = in_flight.get();
  EXPECT_EQ(r.status, 202);
  EXPECT_EQ(r.body, "late");
  EXPECT_EQ(r.headers["connection"], "close");
  HttpClient late("127.0.0.1", port, 2s);
  EXPECT_EQ(late.Post("/echo", {}, "x").status, 0);
}

TEST_F(ServerTest, IdleKeepAliveHasItsOwnTimeoutLongerThanTheHeaderTimeout) {
  ServerOptions options;
  options.header_timeout = 300ms;
  options.idle_timeout = 1500ms;
  StartServer(options);
  // After one request the connection idles: it outlives the header timeout
  // and closes at the idle timeout.
  std::string reply;
  int64_t ms = MillisUntilClosed(server_->port(), "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi",
                                 5s, &reply);
  EXPECT_THAT(reply, HasSubstr("HTTP/1.1 200"));
  EXPECT_GE(ms, 1400);
  EXPECT_LE(ms, relay::testing::Within(1500ms, 700ms).count());
  // A new connection that sends nothing gets only the header timeout.
  ms = MillisUntilClosed(server_->port(), "", 5s);
  EXPECT_GE(ms, 250);
  EXPECT_LE(ms, relay::testing::Within(300ms, 600ms).count());
  // And a kept-alive connection used again within the idle timeout works.
  HttpClient client("127.0.0.1", server_->port());
  ASSERT_EQ(client.Post("/echo", {}, "one").status, 200);
  std::this_thread::sleep_for(700ms);  // past the header timeout, within the idle one
  EXPECT_EQ(client.Post("/echo", {}, "two").status, 200);
}

TEST_F(ServerTest, RequestHeldPastTheHandlerDeadlineIs503AndTheLateAnswerIsDropped) {
  ServerOptions options;
  options.handler_timeout = 500ms;
  StartServer(options);
  HttpClient client("127.0.0.1", server_->port(), 5s);
  auto start = std::chrono::steady_clock::now();
  auto r = client.Post("/held", {}, "x");
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(r.headers["retry-after"], "1");
  EXPECT_GE(took, 450ms);
  EXPECT_LT(took, relay::testing::Within(500ms, 500ms));
  {
    // The handler answers late: nothing reaches the client, nothing breaks.
    std::lock_guard lock(held_mu_);
    ASSERT_EQ(held_.size(), 1u);
    held_[0].second.Send(MakeResponse(202, "too late", "text/plain"));
  }
  EXPECT_EQ(client.Post("/echo", {}, "next").body, "next");  // the same connection
  EXPECT_THAT(MetricsWith("relay_http_connection_errors_total{reason=\"handler_timeout\"} 1"), HasSubstr("relay_http_connection_errors_total{reason=\"handler_timeout\"} 1"));
}

TEST_F(ServerTest, ConnectionsPastTheCapGet503WithRetryAfter) {
  ServerOptions options;
  options.max_connections = 2;
  StartServer(options);
  HttpClient a("127.0.0.1", server_->port()), b("127.0.0.1", server_->port());
  ASSERT_EQ(a.Post("/echo", {}, "a").status, 200);
  ASSERT_EQ(b.Post("/echo", {}, "b").status, 200);
  std::string reply = RawExchange("127.0.0.1", server_->port(), "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 3s);
  EXPECT_THAT(reply, HasSubstr("HTTP/1.1 503"));
  EXPECT_THAT(reply, HasSubstr("Retry-After: 1"));
  EXPECT_THAT(MetricsWith("relay_http_connection_errors_total{reason=\"over_capacity\"} 1"), HasSubstr("relay_http_connection_errors_total{reason=\"over_capacity\"} 1"));
}

TEST_F(ServerTest, BodiesInFlightPastTheBudgetGet503BeforeTheyAreRead) {
  ServerOptions options;
  options.max_body_bytes_in_flight = 1000;
  options.body_timeout = 3s;
  StartServer(options);
  // One sender declares 800 bytes and sends only part: they stay reserved.
  auto slow = std::async(std::launch::async, [port = server_->port()] {
    return RawExchange("127.0.0.1", port, "POST /big HTTP/1.1\r\nHost: x\r\nContent-Length: 800\r\n\r\nabc", 5s);
  });
  std::string metrics;
  for (int i = 0; i < 200 && metrics.find("relay_http_body_bytes_in_flight 800") == std::string::npos; ++i) {
    std::this_thread::sleep_for(10ms);
    metrics = Metrics();
  }
  ASSERT_THAT(metrics, HasSubstr("relay_http_body_bytes_in_flight 800"));
  std::string refused = RawExchange("127.0.0.1", server_->port(),
                                    "POST /big HTTP/1.1\r\nHost: x\r\nContent-Length: 300\r\n\r\n", 3s);
  EXPECT_THAT(refused, HasSubstr("HTTP/1.1 503"));
  EXPECT_THAT(refused, HasSubstr("Retry-After: 1"));
  // A chunked body that grows past the budget is refused too.
  std::string chunked = RawExchange("127.0.0.1", server_->port(),
                                    "POST /big HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                                    "12c\r\n" + std::string(300, 'y') + "\r\n0\r\n\r\n", 3s);
  EXPECT_THAT(chunked, HasSubstr("HTTP/1.1 503"));
  // Within the budget, bodies pass; the slow sender's bytes come back when
  // it is cut off.
  HttpClient client("127.0.0.1", server_->port());
  EXPECT_EQ(client.Post("/big", {}, std::string(150, 'z')).body, "150");
  EXPECT_EQ(slow.get(), "");
  EXPECT_THAT(MetricsWith("relay_http_body_bytes_in_flight 0"), HasSubstr("relay_http_body_bytes_in_flight 0"));
  EXPECT_EQ(client.Post("/big", {}, std::string(900, 'z')).body, "900");
  EXPECT_THAT(MetricsWith("relay_http_connection_errors_total{reason=\"body_budget\"} 2"), HasSubstr("relay_http_connection_errors_total{reason=\"body_budget\"} 2"));
}

TEST_F(ServerTest, AnEarlyRefusalReachesAClientStillUploadingItsBody) {
  StartServer();
  // The client is still uploading when the 413 (sent after the headers)
  // arrives, and only reads once its upload is done. A plain close would
  // make the kernel answer the rest of the upload with a reset, which throws
  // away the 413 the client has not read yet.
  namespace net = boost::asio;
  net::io_context ioc;
  net::ip::tcp::socket socket(ioc);
  socket.connect({net::ip::make_address("127.0.0.1"), server_->port()});
  boost::system::error_code ec;
  net::write(socket, net::buffer(std::string("POST /small HTTP/1.1\r\nHost: x\r\nContent-Length: 2000000\r\n\r\n") +
                                 std::string(100'000, 'u')), ec);
  std::this_thread::sleep_for(200ms);  // the server has answered and, without lingering, closed
  net::write(socket, net::buffer(std::string(1'900'000, 'u')), ec);
  std::string reply;
  char buf[4096];
  for (size_t n; (n = socket.read_some(net::buffer(buf), ec)) > 0 || !ec;) reply.append(buf, n);
  EXPECT_THAT(reply, HasSubstr("HTTP/1.1 413"));
}

TEST_F(ServerTest, EachRouteHasItsOwnBodyLimit) {
  StartServer();
  HttpClient client("127.0.0.1", server_->port());
  EXPECT_EQ(client.Post("/small", {}, "0123456789").status, 200);
  // Over the route's limit: refused on the declared length, body unread.
  std::string reply = RawExchange("127.0.0.1", server_->port(),
                                  "POST /small HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\n", 3s);
  EXPECT_THAT(reply, HasSubstr("HTTP/1.1 413"));
  // An unknown path takes only the default limit.
  reply = RawExchange("127.0.0.1", server_->port(),
                      "POST /nowhere HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n", 3s);
  EXPECT_THAT(reply, HasSubstr("HTTP/1.1 413"));
  EXPECT_EQ(client.Post("/big", {}, std::string(500'000, 'b')).body, "500000");
}

}  // namespace
}  // namespace relay::http
