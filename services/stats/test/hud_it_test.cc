// The HUD's server against Debian's real ClickHouse 18.16 (the ctest
// fixture, whose launcher makes the read-only relay_hud user), over a real
// HTTP listener, with pages of the test's own next to nothing else:
// - pages read as the read-only user, a write through it is refused, and a
//   writable user is not used at all;
// - a request abandoned by its reader leaves no query running once its
//   budget is spent (system.processes), though the service's ClickHouse
//   timeout is a minute;
// - identical requests at once cost one page, and one more within the TTL
//   none.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <thread>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>

#include "relay/clickhouse/client.h"
#include "relay/http/router.h"
#include "relay/stats/hud/html.h"
#include "relay/stats/hud/hud_server.h"
#include "support/http_client.h"
#include "support/subprocess.h"
#include "support/timing.h"

namespace relay::stats::hud {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

std::string Url() {
  std::string url = testing::ReadFile(testing::Env("RELAY_IT_CLICKHOUSE_DIR") + "/url");
  while (!url.empty() && (url.back() == '\n' || url.back() == '/')) url.pop_back();
  return url;
}

std::unique_ptr<clickhouse::Client> Admin() {
  clickhouse::ClientOptions o;
  o.url = Url();
  return std::move(*clickhouse::Client::New(o));
}

// What the test pages read; set by each test before its requests.
std::string g_marker;  // in the endless query's text, to find it in system.processes
std::string g_table;   // the table the write page tries to create
std::atomic<int> g_made{0};
std::atomic<bool> g_released{false};  // the held page may finish

absl::StatusOr<std::string> EndlessPage(const Params&, PageContext& ctx) {
  auto r = ctx.client.Query("SELECT count() FROM system.numbers WHERE number % 7 = 3 AND '" + g_marker + "' != ''");
  if (!r.ok()) return r.status();
  return Frame("endless", "", "done");
}

absl::StatusOr<std::string> OncePage(const Params&, PageContext& ctx) {
  int n = ++g_made;
  auto r = ctx.client.Query("SELECT sleep(1)");
  if (!r.ok()) return r.status();
  return Frame("once", "", "made " + std::to_string(n));
}

// Holds its thread until the test releases it (or 10 s pass): the queue
// behind it is built while it holds, whatever the machine's speed.
absl::StatusOr<std::string> HeldPage(const Params&, PageContext&) {
  int n = ++g_made;
  for (int i = 0; i < 2000 && !g_released.load(); ++i) std::this_thread::sleep_for(5ms);
  return Frame("held", "", "made " + std::to_string(n));
}

absl::StatusOr<std::string> WritePage(const Params&, PageContext& ctx) {
  auto readonly = ctx.client.Query("SELECT value FROM system.settings WHERE name = 'readonly'");
  auto create = ctx.client.Query("CREATE TABLE " + g_table + " (x UInt64) ENGINE = Memory");
  return Frame("write", "", "readonly=" + (readonly.ok() ? *readonly : readonly.status().ToString()) +
                                 " create=" + (create.ok() ? std::string("ok") : create.status().ToString()));
}

// A HudServer over the test pages, on a real listener.
class Hud {
 public:
  explicit Hud(const std::string& user, std::chrono::milliseconds budget = 1s, int threads = 4) {
    HudOptions o;
    o.threads = threads;
    o.clickhouse.url = Url();
    o.clickhouse.user = user;
    // The service's own ClickHouse timeout: a minute. The page budget, not
    // this, must bound the HUD's queries.
    o.clickhouse.timeout = 60s;
    o.clickhouse.max_attempts = 1;
    o.clickhouse.settings = {{"max_rows_to_read", "100000000000"}, {"max_memory_usage", "1000000000"}};
    o.timeout = budget;
    o.pages = {{"/hud/it-endless", "it-endless", &EndlessPage},
               {"/hud/it-once", "it-once", &OncePage},
               {"/hud/it-held", "it-held", &HeldPage},
               {"/hud/it-write", "it-write", &WritePage}};
    hud_ = std::make_unique<HudServer>(std::move(o), registry_);
    hud_->AddRoutes(router_);
    http::ServerOptions so;
    so.handler_timeout = budget + clickhouse::kKillTimeout;  // as relay-stats' settings require
    server_ = std::move(*http::Server::Start(so, router_.AsHandler(), nullptr));
  }
  ~Hud() {
    server_->Shutdown(5s);
    server_.reset();
    hud_.reset();
  }
  uint16_t port() const { return server_->port(); }

 private:
  prometheus::Registry registry_;
  http::Router router_;
  std::unique_ptr<HudServer> hud_;
  std::unique_ptr<http::Server> server_;
};

TEST(HudIT, PagesReadAsTheReadOnlyUserAndAWriteThroughItIsRefused) {
  g_table = "it_hud_write_" + testing::Unique();
  Hud hud("relay_hud");
  auto page = testing::HttpClient("127.0.0.1", hud.port()).Get("/hud/it-write");
  ASSERT_EQ(page.status, 200) << page.body;
  EXPECT_THAT(page.body, HasSubstr("readonly=2"));
  EXPECT_THAT(page.body, HasSubstr("PERMISSION_DENIED"));
  EXPECT_THAT(page.body, HasSubstr("Cannot create table in readonly mode"));
  EXPECT_EQ(*Admin()->Query("EXISTS TABLE " + g_table), "0\n");
}

TEST(HudIT, AWritableUserIsNeverUsed) {
  g_table = "it_hud_write_" + testing::Unique();
  Hud hud("default");
  auto page = testing::HttpClient("127.0.0.1", hud.port()).Get("/hud/it-write");
  EXPECT_EQ(page.status, 503) << page.body;
  EXPECT_EQ(*Admin()->Query("EXISTS TABLE " + g_table), "0\n") << "the page wrote as a writable user";
  auto refused = NewReadOnlyClient([] {
    clickhouse::ClientOptions o;
    o.url = Url();
    return o;
  }());
  EXPECT_TRUE(absl::IsFailedPrecondition(refused.status())) << refused.status();
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("'default' may write"));
}

int64_t Running(clickhouse::Client& admin, const std::string& marker) {
  auto r = admin.Query("SELECT count() FROM system.processes WHERE query LIKE " + clickhouse::Quote("%" + marker + "%") +
                       " AND query NOT LIKE '%system.processes%'");
  return r.ok() ? std::stoll(*r) : -1;
}

TEST(HudIT, AnAbandonedRequestLeavesNoQueryRunning) {
  g_marker = "it-abandoned-" + testing::Unique();
  auto admin = Admin();
  // A second's budget, longer on a sanitizer build: the query must be
  // seen running before the budget ends it.
  const auto budget = std::chrono::duration_cast<std::chrono::milliseconds>(1s * testing::TimeScale());
  Hud hud("relay_hud", budget);
  auto start = std::chrono::steady_clock::now();
  {
    // The reader asks and goes away at once.
    boost::asio::io_context ioc;
    boost::asio::ip::tcp::socket s(ioc);
    s.connect({boost::asio::ip::make_address("127.0.0.1"), hud.port()});
    std::string req = "GET /hud/it-endless HTTP/1.1\r\nHost: x\r\n\r\n";
    boost::asio::write(s, boost::asio::buffer(req));
  }
  ASSERT_TRUE(testing::WaitFor([&] { return Running(*admin, g_marker) == 1; }, budget - 100ms, 10ms))
      << "the page's query never showed in system.processes";
  // By the end of the request's handler deadline (budget + kill margin),
  // nothing it started is running.
  bool gone = testing::WaitFor([&] { return Running(*admin, g_marker) == 0; }, budget + clickhouse::kKillTimeout, 50ms);
  EXPECT_TRUE(gone) << "the query outlived its request";
  EXPECT_LT(std::chrono::steady_clock::now() - start, budget + clickhouse::kKillTimeout + 500ms);
  // A reader who waits gets a 503 within the budget, not the handler's.
  auto waited = testing::HttpClient("127.0.0.1", hud.port()).Get("/hud/it-endless");
  EXPECT_EQ(waited.status, 503);
  EXPECT_THAT(waited.body, HasSubstr("did not answer in time"));
  EXPECT_EQ(Running(*admin, g_marker), 0);
}

TEST(HudIT, IdenticalRequestsAtOnceMakeThePageOnce) {
  g_made = 0;
  Hud hud("relay_hud", 5s);
  std::vector<std::future<testing::HttpResult>> asked;
  for (int i = 0; i < 6; ++i) {
    asked.push_back(std::async(std::launch::async, [&hud, i] {
      // The same page, its parameters spelled in two orders.
      return testing::HttpClient("127.0.0.1", hud.port()).Get(i % 2 ? "/hud/it-once?a=1&b=2" : "/hud/it-once?b=2&a=1");
    }));
  }
  for (auto& f : asked) {
    auto r = f.get();
    EXPECT_EQ(r.status, 200);
    EXPECT_THAT(r.body, HasSubstr("made 1"));
  }
  EXPECT_EQ(g_made.load(), 1) << "identical requests made the page more than once";
  auto again = std::chrono::steady_clock::now();
  auto cached = testing::HttpClient("127.0.0.1", hud.port()).Get("/hud/it-once?a=1&b=2");
  EXPECT_THAT(cached.body, HasSubstr("made 1"));
  // Under the page's own second (it sleeps in ClickHouse for one).
  EXPECT_LT(std::chrono::steady_clock::now() - again, 900ms) << "a kept answer waited for ClickHouse";
  EXPECT_EQ(g_made.load(), 1);
  // Other parameters are another page.
  EXPECT_THAT(testing::HttpClient("127.0.0.1", hud.port()).Get("/hud/it-once?a=2").body, HasSubstr("made 2"));
  // A window past the bound is refused before any page is made.
  auto year = testing::HttpClient("127.0.0.1", hud.port()).Get("/hud/it-once?days=365");
  EXPECT_EQ(year.status, 400);
  EXPECT_THAT(year.body, HasSubstr("at most 90 days"));
  EXPECT_EQ(g_made.load(), 2);
}

// With every thread busy, the page a crowd waits for is made before the
// pages one reader each asked for, though it was asked for last.
TEST(HudIT, ThePageMostWaitedForIsMadeFirst) {
  g_made = 0;
  Hud hud("relay_hud", 8s, /*threads=*/1);
  auto get = [&hud](std::string path) {
    return std::async(std::launch::async, [&hud, path] { return testing::HttpClient("127.0.0.1", hud.port()).Get(path); });
  };
  g_released = false;
  auto busy = get("/hud/it-held");  // holds the one thread until released
  ASSERT_TRUE(testing::WaitFor([] { return g_made.load() == 1; }, 5s, 5ms));
  // Gaps long enough for each request to be queued before the next, on a
  // sanitizer build too: the held page waits for them.
  auto lone1 = get("/hud/it-once?lone=1");
  std::this_thread::sleep_for(300ms);
  auto lone2 = get("/hud/it-once?lone=2");
  std::this_thread::sleep_for(300ms);
  std::vector<std::future<testing::HttpResult>> crowd;
  for (int i = 0; i < 3; ++i) crowd.push_back(get("/hud/it-once?crowd=1"));
  std::this_thread::sleep_for(500ms);
  EXPECT_EQ(g_made.load(), 1) << "a page was made while the one thread was held";
  g_released = true;
  EXPECT_THAT(busy.get().body, HasSubstr("made 1"));
  for (auto& c : crowd) EXPECT_THAT(c.get().body, HasSubstr("made 2")) << "the crowd's page waited behind lone ones";
  EXPECT_THAT(lone1.get().body, HasSubstr("made 3"));
  EXPECT_THAT(lone2.get().body, HasSubstr("made 4"));
}

}  // namespace
}  // namespace relay::stats::hud
