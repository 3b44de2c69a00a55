// The published CI files' JSON from rows as ClickHouse returns them.
#include "relay/stats/ci_files.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/json.hpp>

namespace relay::stats {
namespace {

namespace json = boost::json;
using ::testing::ElementsAre;

hud::ResultSet Rows(const json::array& meta_names, const json::array& data) {
  json::array meta;
  for (const auto& n : meta_names) meta.push_back(json::object{{"name", n}, {"type", "String"}});
  return *hud::ResultSet::Parse(json::serialize(json::object{{"meta", meta}, {"data", data}}));
}

std::string Issue(int number, const std::string& state, const std::string& title, const std::string& body) {
  return json::serialize(json::object{
      {"action", "edited"},
      {"issue", json::object{{"number", number},
                             {"state", state},
                             {"title", title},
                             {"body", body},
                             {"html_url", "https://github.com/o/r/issues/" + std::to_string(number)}}}});
}

TEST(CiFiles, PlatformsAreTheKnownOnesOfTheBodysLineSortedOrNoneForAll) {
  EXPECT_THAT(ParsePlatforms("Platforms: Linux, mac,  rocm\nmore"), ElementsAre("linux", "mac", "rocm"));
  EXPECT_THAT(ParsePlatforms("text\n  platforms: win windows, nonsense\n"), ElementsAre("win", "windows"));
  EXPECT_TRUE(ParsePlatforms("no such line").empty());
  EXPECT_TRUE(ParsePlatforms("Platforms:").empty());
}

TEST(CiFiles, DisabledTestsFollowEachIssuesLatestStateAndMergePlatforms) {
  json::array data{
      json::array{"o/r", 1, Issue(10, "open", "DISABLED test_a (__main__.TestX)", "Platforms: linux")},
      json::array{"o/r", 2, Issue(11, "open", "DISABLED test_a (__main__.TestX)", "Platforms: mac")},
      json::array{"o/r", 3, Issue(12, "open", "DISABLED test_b (__main__.TestY)", "")},
      json::array{"o/r", 4, Issue(12, "closed", "DISABLED test_b (__main__.TestY)", "")},  // enabled again
      json::array{"o/r", 5, Issue(13, "open", "DISABLED test_c (__main__.TestZ)", "Platforms: win")},
      json::array{"o/r", 6, Issue(14, "open", "DISABLED test_c (__main__.TestZ)", "")},  // every platform
      json::array{"o/r", 7, Issue(15, "open", "Not a DISABLED issue", "")},
      json::array{"o/r", 9, Issue(16, "open", "DISABLED test_d (__main__.TestW)", "")},  // every platform...
      json::array{"o/r", 10, Issue(17, "open", "DISABLED test_d (__main__.TestW)", "Platforms: linux")},  // stays so
      json::array{"o/r", 8, "not json"},
  };
  json::value got = json::parse(DisabledTestsJson(Rows({"repo", "received_at_ms", "payload"}, data)));
  EXPECT_EQ(got, json::parse(R"j({
    "test_a (__main__.TestX)": ["10", "https://github.com/o/r/issues/10", ["linux", "mac"]],
    "test_c (__main__.TestZ)": ["13", "https://github.com/o/r/issues/13", []],
    "test_d (__main__.TestW)": ["16", "https://github.com/o/r/issues/16", []]})j"));
}

TEST(CiFiles, TestTimesAddPyTorchsDefaultFallbacks) {
  json::array data{json::array{"linux-a", "default", "test_nn", 10.0}, json::array{"linux-b", "default", "test_nn", 20.0},
                   json::array{"linux-a", "slow", "test_ops", 30.0}};
  json::value got = json::parse(TestTimesJson(Rows({"env", "config", "test_file", "seconds"}, data)));
  EXPECT_EQ(got.at("linux-a").at("default").at("test_nn").to_number<double>(), 10.0);
  EXPECT_EQ(got.at("default").at("default").at("test_nn").to_number<double>(), 15.0);
  EXPECT_EQ(got.at("default").at("slow").at("test_ops").to_number<double>(), 30.0);
  EXPECT_EQ(got.at("default").at("default").at("test_ops").to_number<double>(), 30.0);
}

TEST(CiFiles, FlakyTestsAreOneEntryPerTestAcrossRepositories) {
  json::array data{json::array{"a/x", "test/test_nn.py", "test_nn.TestNN", "test_f", 2, 1, 10, 3},
                   json::array{"b/y", "test/test_nn.py", "test_nn.TestNN", "test_f", 1, 0, 5, 1}};
  json::value got = json::parse(FlakyTestsJson(Rows(
      {"repo", "file", "classname", "name", "flaky_commits", "passed_on_rerun", "total_runs", "total_failed"}, data)));
  EXPECT_EQ(got, json::parse(R"j({"test_f (__main__.TestNN)": {"file": "test/test_nn.py", "flaky_commits": 3,
                                 "passed_on_rerun": 1, "runs": 15, "failed": 4}})j"));
}

}  // namespace
}  // namespace relay::stats
