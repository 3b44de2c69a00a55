// The outbound client: keep-alive reuse, a stale connection replaced before
// sending, deadlines that hold, and TLS with certificate and host name
// checks against a real TLS server (`openssl s_server`).
#include "relay/http/client.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "relay/http/router.h"
#include "relay/http/server.h"
#include "prometheus/text_serializer.h"
#include "support/subprocess.h"
#include "support/timing.h"

namespace relay::http {
namespace {

namespace bhttp = boost::beast::http;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

class ClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    router_.Add(bhttp::verb::post, "/echo", [this](Request&& req, Responder r) {
      ++requests_;
      Response res = MakeResponse(201, req.body(), "text/plain");
      res.set("X-RateLimit-Remaining", "41");
      r.Send(std::move(res));
    });
    router_.Add(bhttp::verb::get, "/never", [this](Request&&, Responder r) {
      std::lock_guard lock(mu_);
      held_.push_back(std::move(r));
    });
    ServerOptions options;
    options.idle_timeout = 1s;
    auto server = Server::Start(options, router_.AsHandler(), &registry_);
    ASSERT_TRUE(server.ok());
    server_ = std::move(*server);
  }
  // The held responders go (answered 500) while the server lives, under the
  // lock the server thread took to add them (TSan sees the order).
  void TearDown() override {
    std::lock_guard lock(mu_);
    held_.clear();
  }
  std::string Origin() { return "http://127.0.0.1:" + std::to_string(server_->port()); }

  prometheus::Registry registry_;
  Router router_;
  std::atomic<int> requests_{0};
  std::mutex mu_;
  std::unique_ptr<Server> server_;
  std::vector<Responder> held_;  // after server_: answered 500 while it lives
};

TEST_F(ClientTest, ReusesTheConnectionAndReplacesAStaleOneWithoutResending) {
  auto client = Client::New(Origin());
  ASSERT_TRUE(client.ok()) << client.status();
  for (int i = 0; i < 3; ++i) {
    auto r = (*client)->Send(bhttp::verb::post, "/echo", {{"Content-Type", "text/plain"}}, "hi");
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->status, 201u);
    EXPECT_EQ(r->body, "hi");
    EXPECT_EQ(r->Header("x-ratelimit-remaining"), "41");
  }
  EXPECT_THAT(prometheus::TextSerializer().Serialize(registry_.Collect()), HasSubstr("relay_http_open_connections 1"));
  // The server closes the idle connection (1 s); the next POST goes out once,
  // on a new connection.
  auto closed = [&] {
    return prometheus::TextSerializer().Serialize(registry_.Collect()).find("relay_http_open_connections 0") !=
           std::string::npos;
  };
  ASSERT_TRUE(relay::testing::WaitFor(closed, 10s)) << "the server never closed the idle connection";
  auto r = (*client)->Send(bhttp::verb::post, "/echo", {}, "again");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(requests_.load(), 4);
}

TEST_F(ClientTest, ARequestWithoutAnAnswerEndsAtTheDeadlineAsMaybeSent) {
  ClientOptions options;
  options.request_timeout = 400ms;
  auto client = Client::New(Origin(), options);
  ASSERT_TRUE(client.ok());
  auto start = std::chrono::steady_clock::now();
  auto r = (*client)->Send(bhttp::verb::get, "/never", {}, "");
  auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::IsUnavailable(r.status()));
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("after sending"));
  EXPECT_GE(took, 380ms);
  EXPECT_LT(took, relay::testing::Within(400ms, 400ms));
  // Nothing listens on port 1: refused at connect, before sending.
  auto refused = Client::New("http://127.0.0.1:1");
  ASSERT_TRUE(refused.ok());
  auto c = (*refused)->Send(bhttp::verb::get, "/", {}, "");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("connect"));
}

TEST(ClientOriginTest, RejectsWhatIsNotAnHttpUrl) {
  EXPECT_FALSE(Client::New("ftp://x").ok());
  EXPECT_FALSE(Client::New("api.github.com").ok());
  EXPECT_TRUE(Client::New("https://api.github.com").ok());
  EXPECT_TRUE(Client::New("https://ghe.example.com/api/v3/").ok());
}

// A real TLS server: openssl s_server with a self-signed certificate for
// "localhost", answering any GET with a page (-www).
class TlsClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = "/tmp/relay-tls-" + std::to_string(::getpid());
    ASSERT_EQ(relay::testing::RunCommand("mkdir -p " + dir_ + " && openssl req -x509 -newkey rsa:2048 -nodes -days 1 "
                                         "-subj /CN=localhost -addext subjectAltName=DNS:localhost -keyout " +
                                         dir_ + "/key.pem -out " + dir_ + "/cert.pem 2>/dev/null"),
              0);
    std::string port_out;
    relay::testing::RunCommand(
        "python3 -c 'import socket; s=socket.socket(); s.bind((\"127.0.0.1\",0)); print(s.getsockname()[1])'",
        &port_out);
    port_ = std::stoi(port_out);
    server_ = std::make_unique<relay::testing::Subprocess>(
        std::vector<std::string>{"/usr/bin/openssl", "s_server", "-accept", "127.0.0.1:" + std::to_string(port_),
                                 "-cert", dir_ + "/cert.pem", "-key", dir_ + "/key.pem", "-www", "-quiet"},
        std::map<std::string, std::string>{}, dir_ + "/server.log");
    // Up when it accepts.
    for (int i = 0; i < 100; ++i) {
      if (relay::testing::RunCommand("bash -c 'exec 3<>/dev/tcp/127.0.0.1/" + std::to_string(port_) + "' 2>/dev/null") == 0) break;
      std::this_thread::sleep_for(50ms);
    }
  }
  void TearDown() override {
    server_.reset();
    relay::testing::RunCommand("rm -rf " + dir_);
  }
  std::string dir_;
  int port_ = 0;
  std::unique_ptr<relay::testing::Subprocess> server_;
};

TEST_F(TlsClientTest, VerifiesTheCertificateAndTheHostName) {
  ClientOptions trusted;
  trusted.ca_file = dir_ + "/cert.pem";
  auto good = Client::New("https://localhost:" + std::to_string(port_), trusted);
  ASSERT_TRUE(good.ok()) << good.status();
  auto r = (*good)->Send(bhttp::verb::get, "/", {}, "");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 200u);
  // The same server under a name its certificate does not carry.
  auto wrong_name = Client::New("https://127.0.0.1:" + std::to_string(port_), trusted);
  ASSERT_TRUE(wrong_name.ok());
  auto bad = (*wrong_name)->Send(bhttp::verb::get, "/", {}, "");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("TLS handshake"));
  // A certificate nobody vouches for (the system trust store).
  auto untrusted = Client::New("https://localhost:" + std::to_string(port_));
  ASSERT_TRUE(untrusted.ok());
  EXPECT_FALSE((*untrusted)->Send(bhttp::verb::get, "/", {}, "").ok());
}

}  // namespace
}  // namespace relay::http
