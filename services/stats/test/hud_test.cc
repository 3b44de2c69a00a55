// The HUD's parts that need no ClickHouse: parameter checks, escaping,
// the JSON data blocks, ClickHouse's JSONCompact answers, the assets.
// (The pages against real data, in a browser: tests/hud/browser_test.py,
// run by dev_up_e2e_test over the dev stack.)
#include <gtest/gtest.h>

#include "relay/stats/hud/html.h"
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
