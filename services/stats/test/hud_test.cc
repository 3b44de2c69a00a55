// The HUD's parts that need no ClickHouse: parameter checks (the bounded
// days), escaping, the JSON data blocks, ClickHouse's JSONCompact answers,
// the assets, the page cache (single flight, TTL, memory bound).
// (The pages against real data, in a browser: tests/hud/browser_test.py,
// run by dev_up_e2e_test over the dev stack.)
#include <gtest/gtest.h>

#include "relay/base/clock.h"
#include "relay/http/testing/capture.h"
#include "relay/stats/hud/html.h"
#include "relay/stats/hud/page_cache.h"
#include "relay/stats/hud/pages.h"
#include "relay/stats/hud_assets.h"

namespace relay::stats::hud {
namespace {

TEST(HudParams, RepoNamesAreOwnerSlashNameOnly) {
  EXPECT_EQ(*RepoParam({{"name", "dev-org/l4-cuda"}}, "name", true), "dev-org/l4-cuda");
  EXPECT_EQ(*RepoParam({}, "name", false), "");
  EXPECT_EQ(RepoParam({}, "name", true).status().code(), absl::StatusCode::kInvalidArgument);
  for (const char* bad : {"noslash", "/x", "x/", "a/b/c", "a/b' OR 1=1 --", "a/<script>", "a/b\n"}) {
    auto r = RepoParam({{"name", bad}}, "name", true);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find("parameter name"), absl::string_view::npos);
    }
  }
}

TEST(HudParams, RepoNamesAreLowerCasedAsRelayKeysThem) {
  EXPECT_EQ(*RepoParam({{"name", "PyTorch/PyTorch"}}, "name", true), "pytorch/pytorch");
}

TEST(HudParams, OnlyParameterErrorsAreMarkedAsTheReadersFault) {
  auto bad = IntParam({{"pr", "x"}}, "pr", 0, 1, 10);
  EXPECT_TRUE(IsBadParameter(bad.status()));
  // ClickHouse's own InvalidArgument (a syntax error, a missing column) is not.
  EXPECT_FALSE(IsBadParameter(absl::InvalidArgumentError("Code: 62, Syntax error")));
  EXPECT_FALSE(IsBadParameter(absl::OkStatus()));
}

TEST(HudParams, NumbersAreDigitsInRange) {
  EXPECT_EQ(*IntParam({}, "pr", 0, 1, 10), 0);
  EXPECT_EQ(*IntParam({{"pr", ""}}, "pr", 0, 1, 10), 0);
  EXPECT_EQ(*IntParam({{"pr", "7"}}, "pr", 0, 1, 10), 7);
  for (const char* bad : {"abc", "-1", "11", "0", "1e3", "7 OR 1=1", "99999999999999999999"}) {
    EXPECT_EQ(IntParam({{"pr", bad}}, "pr", 0, 1, 10).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(HudParams, TextHasALimitAndNoControlCharacters) {
  EXPECT_EQ(*TextParam({{"name", "test_add (x.y)"}}, "name", 100, true), "test_add (x.y)");
  EXPECT_FALSE(TextParam({{"name", std::string(101, 'a')}}, "name", 100, true).ok());
  EXPECT_FALSE(TextParam({{"name", "a\x01"}}, "name", 100, true).ok());
  EXPECT_FALSE(TextParam({}, "name", 100, true).ok());
}

TEST(HudParams, DaysAreBoundedWithAClearReasonNeverClamped) {
  EXPECT_EQ(*DaysParam({}, 30, 90), 30);
  EXPECT_EQ(*DaysParam({{"days", ""}}, 30, 90), 30);
  EXPECT_EQ(*DaysParam({}, 30, 20), 20) << "the fallback itself is within the bound";
  EXPECT_EQ(*DaysParam({{"days", "90"}}, 30, 90), 90);
  auto year = DaysParam({{"days", "365"}}, 30, 90);
  ASSERT_FALSE(year.ok());
  EXPECT_TRUE(IsBadParameter(year.status()));
  EXPECT_EQ(year.status().message(),
            "parameter days: at most 90 days (the HUD's limit, stats.hud_max_days); asked for 365");
  for (const char* bad : {"0", "-1", "x", "1e3", "99999999999999999999"}) {
    auto r = DaysParam({{"days", bad}}, 30, 90);
    EXPECT_TRUE(IsBadParameter(r.status())) << bad;
  }
}

// The pages refuse a window past the bound before any query: this client
// points at a port where nothing listens, so a page that queried would
// fail with Unavailable, not with the reader's 400.
TEST(HudParams, EveryPageRefusesDaysPastTheBoundBeforeQuerying) {
  clickhouse::ClientOptions o;
  o.url = "http://127.0.0.1:1";
  o.max_attempts = 1;
  o.connect_timeout = std::chrono::milliseconds(200);
  auto client = clickhouse::Client::New(o);
  ASSERT_TRUE(client.ok());
  TierCache tiers;
  PageContext ctx{**client, tiers, 60};
  for (PageFn page : {&CommitGridPage, &CostPage, &TestPage}) {
    auto r = page({{"days", "61"}, {"name", "test_x"}}, ctx);
    ASSERT_FALSE(r.ok());
    EXPECT_TRUE(IsBadParameter(r.status())) << r.status();
    EXPECT_NE(r.status().message().find("at most 60 days"), absl::string_view::npos) << r.status();
  }
  // Within the bound, the grid goes to ClickHouse (and finds nobody there).
  auto within = CommitGridPage({{"days", "60"}}, ctx);
  EXPECT_FALSE(IsBadParameter(within.status())) << within.status();
}

http::Response Page(std::string body) { return http::MakeResponse(200, std::move(body), "text/html"); }

TEST(HudPageCache, ConcurrentIdenticalRequestsWaitForOneAnswer) {
  FakeClock clock;
  PageCache cache({std::chrono::seconds(10), 1 << 20}, clock);
  auto [first, first_got] = http::testing::CaptureResponder();
  EXPECT_EQ(cache.Join("/hud\ndays=30", first), PageCache::Role::kMake);
  std::vector<std::shared_ptr<http::testing::CapturedResponse>> waiting;
  for (int i = 0; i < 5; ++i) {
    auto [r, got] = http::testing::CaptureResponder();
    EXPECT_EQ(cache.Join("/hud\ndays=30", r), PageCache::Role::kWaiting);
    waiting.push_back(got);
  }
  // Another page is made on its own.
  auto [other, other_got] = http::testing::CaptureResponder();
  EXPECT_EQ(cache.Join("/hud\ndays=14", other), PageCache::Role::kMake);
  for (const auto& w : waiting) EXPECT_EQ(w->count(), 0) << "answered before the page was made";
  EXPECT_EQ(cache.Finish("/hud\ndays=30", Page("the grid"), /*keep=*/true), 5u);
  for (const auto& w : waiting) {
    ASSERT_EQ(w->count(), 1);
    EXPECT_EQ(w->response()->body(), "the grid");
    EXPECT_EQ((*w->response())["X-Cache"], "shared");
  }
  // The maker answers its own request (the cache does not).
  EXPECT_EQ(first_got->count(), 0);
  first.Send(Page("the grid"));
  EXPECT_EQ(other_got->count(), 0);
  cache.Finish("/hud\ndays=14", Page("two weeks"), true);
  EXPECT_EQ(other_got->count(), 0);
}

TEST(HudPageCache, AnAnswerIsReusedForItsTtlOnly) {
  FakeClock clock;
  PageCache cache({std::chrono::seconds(10), 1 << 20}, clock);
  auto [a, a_got] = http::testing::CaptureResponder();
  ASSERT_EQ(cache.Join("k", a), PageCache::Role::kMake);
  cache.Finish("k", Page("v1"), true);
  clock.Advance(std::chrono::milliseconds(9'999));
  auto [b, b_got] = http::testing::CaptureResponder();
  ASSERT_EQ(cache.Join("k", b), PageCache::Role::kAnswered);
  ASSERT_TRUE(b_got->response());
  EXPECT_EQ(b_got->response()->body(), "v1");
  EXPECT_EQ((*b_got->response())["X-Cache"], "hit");
  clock.Advance(std::chrono::milliseconds(1));
  auto [c, c_got] = http::testing::CaptureResponder();
  EXPECT_EQ(cache.Join("k", c), PageCache::Role::kMake) << "kept past its TTL";
  EXPECT_EQ(c_got->count(), 0);
  EXPECT_EQ(cache.entries(), 0u);
  cache.Finish("k", Page("v2"), true);
  auto [d, d_got] = http::testing::CaptureResponder();
  ASSERT_EQ(cache.Join("k", d), PageCache::Role::kAnswered);
  ASSERT_TRUE(d_got->response());
  EXPECT_EQ(d_got->response()->body(), "v2");
}

TEST(HudPageCache, ErrorsAreSharedWithThoseWaitingButNeverKept) {
  FakeClock clock;
  PageCache cache({std::chrono::seconds(10), 1 << 20}, clock);
  auto [a, a_got] = http::testing::CaptureResponder();
  ASSERT_EQ(cache.Join("k", a), PageCache::Role::kMake);
  auto [b, b_got] = http::testing::CaptureResponder();
  ASSERT_EQ(cache.Join("k", b), PageCache::Role::kWaiting);
  EXPECT_EQ(cache.Finish("k", http::MakeResponse(503, "busy", "text/html"), /*keep=*/false), 1u);
  EXPECT_EQ(b_got->status(), 503u);
  auto [c, c_got] = http::testing::CaptureResponder();
  EXPECT_EQ(cache.Join("k", c), PageCache::Role::kMake) << "a 503 must not be served again";
  EXPECT_EQ(cache.entries(), 0u);
}

TEST(HudPageCache, MemoryIsBoundedOldestFirst) {
  FakeClock clock;
  PageCache cache({std::chrono::seconds(60), 25}, clock);
  for (const char* key : {"a", "b", "c"}) {
    auto [r, got] = http::testing::CaptureResponder();
    ASSERT_EQ(cache.Join(key, r), PageCache::Role::kMake);
    cache.Finish(key, Page(std::string(10, *key)), true);
    clock.Advance(std::chrono::seconds(1));
  }
  EXPECT_EQ(cache.bytes(), 20u);
  EXPECT_EQ(cache.entries(), 2u);
  auto [a, a_got] = http::testing::CaptureResponder();
  EXPECT_EQ(cache.Join("a", a), PageCache::Role::kMake) << "the oldest answer went first";
  auto [c, c_got] = http::testing::CaptureResponder();
  EXPECT_EQ(cache.Join("c", c), PageCache::Role::kAnswered);
  // One answer larger than the whole budget is shared, not kept.
  cache.Finish("a", Page(std::string(100, 'x')), true);
  EXPECT_LE(cache.bytes(), 25u);
}

TEST(HudHtml, EscapesTextAndKeepsScriptBlocksClosed) {
  EXPECT_EQ(Escape("<a href=\"x\">'&'</a>"), "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;");
  std::string data = ChartData(boost::json::value{{"labels", {"</script><script>alert(1)</script>"}}});
  EXPECT_EQ(data.find('<'), std::string::npos) << data;
  EXPECT_EQ(boost::json::parse(data).at("labels").at(0).as_string(), "</script><script>alert(1)</script>");
  EXPECT_EQ(UrlEncode("a b&c/d"), "a%20b%26c/d");
  EXPECT_EQ(Duration(3725), "1h 02m");
  EXPECT_EQ(Duration(187), "3m 07s");
  EXPECT_EQ(Percent(0.935), "93.5%");
}

TEST(HudResultSet, ReadsJsonCompactWithQuotedIntegersAndArrays) {
  auto rs = ResultSet::Parse(
      R"j({"meta":[{"name":"repo","type":"String"},{"name":"n","type":"UInt64"},)j"
      R"j({"name":"prs","type":"Array(Int64)"},{"name":"q","type":"Nullable(Float64)"}],)j"
      R"j("data":[["o/r","12",["3","4"],null],["o/s","1",[],1.5]],"rows":2})j");
  ASSERT_TRUE(rs.ok()) << rs.status();
  ASSERT_EQ(rs->size(), 2u);
  EXPECT_EQ(rs->Str(0, "repo"), "o/r");
  EXPECT_EQ(rs->Num(0, "n"), 12);
  EXPECT_EQ(rs->List(0, "prs"), (std::vector<std::string>{"3", "4"}));
  EXPECT_EQ(rs->Str(0, "q"), "");
  EXPECT_EQ(rs->Num(1, "q"), 1.5);
  EXPECT_EQ(rs->Str(1, "no such column"), "");
  EXPECT_FALSE(ResultSet::Parse("not json").ok());
  EXPECT_FALSE(ResultSet::Parse(R"({"meta":[{"name":"a"}],"data":[["x","y"]]})").ok());
}

TEST(HudAssets, ChartJsAndRelaysOwnFilesAreCompiledIn) {
  std::map<std::string, size_t> sizes;
  for (const auto& a : stats::HudAssets()) sizes[std::string(a.path)] = a.body.size();
  EXPECT_GT(sizes["/hud/static/chart.umd.js"], 100'000u);  // Chart.js 4, minified
  EXPECT_GT(sizes["/hud/static/hud.js"], 0u);
  EXPECT_GT(sizes["/hud/static/hud.css"], 0u);
  EXPECT_GT(sizes["/hud/static/favicon.svg"], 0u);
  // Every page the frame links to is routed.
  std::set<std::string> paths;
  for (const auto& p : PageRoutes()) paths.insert(p.path);
  for (const char* p : {"/hud", "/hud/repo", "/hud/tiers", "/hud/test", "/hud/cost"}) EXPECT_TRUE(paths.count(p)) << p;
}

}  // namespace
}  // namespace relay::stats::hud
