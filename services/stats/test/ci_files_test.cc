// The published CI files' JSON from rows as ClickHouse returns them.
#include "relay/stats/ci_files.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "prometheus/text_serializer.h"

namespace relay::stats {
namespace {

namespace json = boost::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

hud::ResultSet Rows(const json::array& meta_names, const json::array& data) {
  json::array meta;
  for (const auto& n : meta_names) meta.push_back(json::object{{"name", n}, {"type", "String"}});
  return *hud::ResultSet::Parse(json::serialize(json::object{{"meta", meta}, {"data", data}}));
}

std::string Issue(int number, const std::string& state, const std::string& title, const std::string& body,
                  const std::string& association = "MEMBER", int64_t user_id = 1000) {
  return json::serialize(json::object{
      {"action", "edited"},
      {"issue", json::object{{"number", number},
                             {"state", state},
                             {"title", title},
                             {"body", body},
                             {"author_association", association},
                             {"user", json::object{{"login", "someone"}, {"id", user_id}}},
                             {"html_url", "https://github.com/o/r/issues/" + std::to_string(number)}}}});
}

// The default policy for the upstream o/r.
DisabledTestsPolicy Upstream(std::set<std::string> repos = {"o/r"}) {
  DisabledTestsPolicy p;
  p.repos = std::move(repos);
  for (const std::string& a : DefaultTrustedAssociations()) p.associations.insert(a);
  return p;
}

json::value Disabled(const json::array& data, const DisabledTestsPolicy& policy,
                     std::map<std::string, int64_t>* verdicts = nullptr) {
  return json::parse(DisabledTestsJson(Rows({"repo", "received_at_ms", "payload"}, data), policy, verdicts));
}

std::string Metrics(prometheus::Registry& registry) {
  return prometheus::TextSerializer().Serialize(registry.Collect());
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
  json::value got = Disabled(data, Upstream());
  EXPECT_EQ(got, json::parse(R"j({
    "test_a (__main__.TestX)": ["10", "https://github.com/o/r/issues/10", ["linux", "mac"]],
    "test_c (__main__.TestZ)": ["13", "https://github.com/o/r/issues/13", []],
    "test_d (__main__.TestW)": ["16", "https://github.com/o/r/issues/16", []]})j"));
}

TEST(CiFiles, DisabledTestsComeOnlyFromTheUpstreamsAndTrustedAuthors) {
  json::array data{
      json::array{"evil-org/x", 1, Issue(1, "open", "DISABLED test_a (__main__.T)", "", "MEMBER")},  // not upstream
      json::array{"o/r", 2, Issue(2, "open", "DISABLED test_b (__main__.T)", "", "NONE")},
      json::array{"o/r", 3, Issue(3, "open", "DISABLED test_c (__main__.T)", "", "CONTRIBUTOR")},
      json::array{"o/r", 4, Issue(4, "open", "DISABLED test_d (__main__.T)", "", "FIRST_TIME_CONTRIBUTOR")},
      json::array{"o/r", 5, Issue(5, "open", "DISABLED test_e (__main__.T)", "Platforms: win", "MEMBER")},
      json::array{"O/R", 6, Issue(6, "open", "DISABLED test_f (__main__.T)", "Platforms: win", "OWNER")},  // case
      json::array{"o/r", 7, Issue(7, "open", "DISABLED test_g (__main__.T)", "Platforms: win", "COLLABORATOR")},
      json::array{"o/r", 8, Issue(8, "open", "DISABLED test_h (__main__.T)", "Platforms: win", "")},  // no field
      // The latest delivery decides: a member who left the organisation.
      json::array{"o/r", 9, Issue(9, "open", "DISABLED test_i (__main__.T)", "", "MEMBER")},
      json::array{"o/r", 10, Issue(9, "open", "DISABLED test_i (__main__.T)", "", "NONE")},
      json::array{"o/r", 11, Issue(11, "closed", "DISABLED test_j (__main__.T)", "", "MEMBER")},
      json::array{"o/r", 12, Issue(12, "open", "about DISABLED tests", "", "MEMBER")},
      json::array{"o/r", 13, "{}"},
  };
  std::map<std::string, int64_t> verdicts;
  EXPECT_EQ(Disabled(data, Upstream(), &verdicts), json::parse(R"j({
    "test_e (__main__.T)": ["5", "https://github.com/o/r/issues/5", ["win"]],
    "test_f (__main__.T)": ["6", "https://github.com/o/r/issues/6", ["win"]],
    "test_g (__main__.T)": ["7", "https://github.com/o/r/issues/7", ["win"]]})j"));
  EXPECT_EQ(verdicts, (std::map<std::string, int64_t>{{"disabled", 3},
                                                      {"other_repository", 1},
                                                      {"untrusted_author", 5},
                                                      {"closed", 1},
                                                      {"not_a_test", 1},
                                                      {"unreadable", 1}}));
  // No upstream configured: nothing is disabled.
  EXPECT_EQ(Disabled(data, Upstream({})), json::object());
}

TEST(CiFiles, ATrustedUserIdCountsWhateverItsAssociation) {
  // PyTorch's disable bot files most DISABLED issues; GitHub gives a bot no
  // association of its own, so it is trusted by its user id.
  json::array data{json::array{"o/r", 1, Issue(1, "open", "DISABLED test_a (__main__.T)", "", "NONE", 54816060)},
                   json::array{"o/r", 2, Issue(2, "open", "DISABLED test_b (__main__.T)", "", "NONE", 54816061)}};
  DisabledTestsPolicy policy = Upstream();
  EXPECT_EQ(Disabled(data, policy), json::object());
  policy.user_ids = {54816060};
  EXPECT_EQ(Disabled(data, policy),
            json::parse(R"j({"test_a (__main__.T)": ["1", "https://github.com/o/r/issues/1", []]})j"));
}

TEST(CiFiles, AnUntrustedIssueWithoutPlatformsDoesNotWidenADisable) {
  json::array data{
      json::array{"o/r", 1, Issue(1, "open", "DISABLED test_a (__main__.T)", "Platforms: linux", "MEMBER")},
      json::array{"o/r", 2, Issue(2, "open", "DISABLED test_a (__main__.T)", "no platforms line", "NONE")},
      json::array{"evil-org/x", 3, Issue(3, "open", "DISABLED test_a (__main__.T)", "", "OWNER")},
      json::array{"o/r", 4, Issue(4, "open", "DISABLED test_b (__main__.T)", "Platforms: linux", "MEMBER")},
      json::array{"o/r", 5, Issue(5, "open", "DISABLED test_b (__main__.T)", "no platforms line", "COLLABORATOR")},
  };
  // A trusted author's issue without the line keeps PyTorch's meaning:
  // every platform (update_disabled_issues.py merges an empty list so).
  EXPECT_EQ(Disabled(data, Upstream()), json::parse(R"j({
    "test_a (__main__.T)": ["1", "https://github.com/o/r/issues/1", ["linux"]],
    "test_b (__main__.T)": ["4", "https://github.com/o/r/issues/4", []]})j"));
}

// The five named queries answered from memory; `fail` names the ones that
// fail, `issues` is what ci_disabled_issues returns.
struct FakeClickHouse {
  std::set<std::string> fail;
  json::array issues, times{json::array{"linux-a", "default", "test_nn", 10.0}};
  std::map<std::string, std::map<std::string, std::string>> params;  // query -> its last parameters

  CiQueryRunner Runner() {
    return [this](const std::string& query, const std::map<std::string, std::string>& p) -> absl::StatusOr<hud::ResultSet> {
      params[query] = p;
      if (fail.count(query)) return absl::UnavailableError("Code: 241, Memory limit exceeded");
      if (query == "ci_test_times") return Rows({"env", "config", "test_file", "seconds"}, times);
      if (query == "ci_test_class_times") return Rows({"env", "config", "test_file", "test_class", "seconds"}, {});
      if (query == "ci_slow_tests") return Rows({"test", "seconds"}, {});
      if (query == "ci_disabled_issues") return Rows({"repo", "received_at_ms", "payload"}, issues);
      if (query == "flaky_tests") {
        return Rows({"repo", "file", "classname", "name", "flaky_commits", "passed_on_rerun", "total_runs",
                     "total_failed"},
                    {});
      }
      return absl::NotFoundError(query);
    };
  }
};

CiFilesOptions Options() {
  CiFilesOptions o;
  o.disabled = Upstream({"o/r", "o/other"});
  o.disabled_days = 30;
  return o;
}

TEST(CiFiles, TheDisabledQueryReadsTheUpstreamsWithinTheWindow) {
  prometheus::Registry registry;
  CiFiles files(Options(), registry);
  FakeClickHouse ch;
  ASSERT_TRUE(files.Refresh(ch.Runner()).ok());
  EXPECT_EQ(ch.params["ci_disabled_issues"],
            (std::map<std::string, std::string>{{"days", "30"}, {"repos", "o/other,o/r"}}));
}

TEST(CiFiles, OneFileFailingLeavesTheOtherFourFresh) {
  prometheus::Registry registry;
  CiFiles files(Options(), registry);
  FakeClickHouse ch;
  ch.issues = {json::array{"o/r", 1, Issue(1, "open", "DISABLED test_a (__main__.T)", "", "MEMBER")}};
  ASSERT_TRUE(files.Refresh(ch.Runner()).ok());
  std::string times_before = files.Get("test-times.json")->body;

  // test-times.json's query now fails; the disabled list changes.
  ch.fail = {"ci_test_times"};
  ch.times = {json::array{"linux-a", "default", "test_nn", 99.0}};
  ch.issues.push_back(json::array{"o/r", 2, Issue(2, "open", "DISABLED test_b (__main__.T)", "", "OWNER")});
  absl::Status st = files.Refresh(ch.Runner());
  EXPECT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("1 of 5 CI files not refreshed"));
  EXPECT_THAT(st.message(), HasSubstr("test-times.json: Code: 241"));
  EXPECT_EQ(files.Get("test-times.json")->body, times_before);  // the last good one
  EXPECT_TRUE(json::parse(files.Get("disabled-tests-condensed.json")->body).as_object().contains("test_b (__main__.T)"));
  for (const std::string& name : CiFiles::Names()) EXPECT_TRUE(files.Get(name).has_value()) << name;
  std::string m = Metrics(registry);
  EXPECT_THAT(m, HasSubstr(R"(relay_stats_ci_file_refreshes_total{file="test-times.json",result="error"} 1)"));
  EXPECT_THAT(m, HasSubstr(R"(relay_stats_ci_file_refreshes_total{file="test-times.json",result="ok"} 1)"));
  EXPECT_THAT(m, HasSubstr(R"(relay_stats_ci_file_refreshes_total{file="disabled-tests-condensed.json",result="ok"} 2)"));
  EXPECT_THAT(m, HasSubstr(R"(relay_stats_ci_file_refreshes_total{file="flaky-tests.json",result="ok"} 2)"));
  EXPECT_THAT(m, HasSubstr(R"(relay_stats_ci_disabled_issues{verdict="disabled"} 2)"));

  // A file that never had a good version stays unserved (503), alone.
  prometheus::Registry other;
  CiFiles fresh(Options(), other);
  ch.fail = {"ci_disabled_issues"};
  EXPECT_FALSE(fresh.Refresh(ch.Runner()).ok());
  EXPECT_FALSE(fresh.Get("disabled-tests-condensed.json").has_value());
  EXPECT_TRUE(fresh.Get("test-times.json").has_value());
}

TEST(CiFiles, AFileOverTheSizeCapIsRefusedAndTheLastGoodOneStays) {
  prometheus::Registry registry;
  CiFilesOptions o = Options();
  o.max_file_bytes = 200;
  CiFiles files(o, registry);
  FakeClickHouse ch;
  ch.issues = {json::array{"o/r", 1, Issue(1, "open", "DISABLED test_a (__main__.T)", "", "MEMBER")}};
  ASSERT_TRUE(files.Refresh(ch.Runner()).ok());
  std::string good = files.Get("disabled-tests-condensed.json")->body;
  ASSERT_LE(good.size(), 200u);

  for (int i = 2; i < 10; ++i) {
    std::string title = "DISABLED test_" + std::to_string(i) + " (__main__.T)";
    ch.issues.push_back(json::array{"o/r", i, Issue(i, "open", title, "", "MEMBER")});
  }
  absl::Status st = files.Refresh(ch.Runner());
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(st.message(), HasSubstr("disabled-tests-condensed.json: "));
  EXPECT_THAT(st.message(), HasSubstr("over stats.ci_files_max_bytes (200)"));
  EXPECT_EQ(files.Get("disabled-tests-condensed.json")->body, good);  // never a truncated list
  EXPECT_THAT(Metrics(registry),
              HasSubstr(R"(relay_stats_ci_file_refreshes_total{file="disabled-tests-condensed.json",result="too_large"} 1)"));
  EXPECT_THAT(Metrics(registry), HasSubstr(R"(relay_stats_ci_file_refreshes_total{file="test-times.json",result="ok"} 2)"));
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
