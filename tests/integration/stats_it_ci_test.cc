// relay-stats on the real broker and ClickHouse: the published CI files and the tier
// report; part of stats_it_test (support: stats_it_support.h).
#include "stats_it_support.h"

namespace relay {
namespace {

using namespace stats_it;

// --- the published CI files ---------------------------------------------------

// An `issues` webhook as intake records it: `repo`'s issue `number`, filed
// by an author with `association`.
std::pair<std::string, std::string> IssueWebhook(const std::string& delivery, const std::string& repo, int number,
                                                 const std::string& association, const std::string& title,
                                                 const std::string& body, int64_t age_ms = 60'000) {
  json::object issue{{"number", number},
                     {"state", "open"},
                     {"title", title},
                     {"body", body},
                     {"author_association", association},
                     {"user", json::object{{"login", "user-" + delivery}, {"id", 7000 + number}, {"type", "User"}}},
                     {"html_url", "https://github.com/" + repo + "/issues/" + std::to_string(number)}};
  std::string payload = json::serialize(json::object{
      {"action", "opened"},
      {"issue", issue},
      {"repository", json::object{{"full_name", repo}, {"id", 1}}},
      {"sender", json::object{{"login", "user-" + delivery}}}});
  v1::WebhookRecord w;
  w.set_delivery_id(delivery);
  w.set_event("issues");
  w.set_action("opened");
  w.set_repository(repo);
  w.set_received_at_unix_ms(NowMs() - age_ms);
  w.set_body(payload);
  w.set_content_type("application/json");
  w.set_body_sha256(Sha256Bytes(payload));
  return {repo, w.SerializeAsString()};
}

// issue 27: two signed `issues` webhooks, one on another repository and one
// on the upstream by an author with association NONE, both disabled a test
// in every CI job within a refresh. Only the upstream's issues by trusted
// authors may, and an untrusted issue without a Platforms: line must not
// widen a trusted one's disable to every platform. Deliveries older than
// stats.ci_disabled_days are not read.
TEST(StatsIt, DisabledTestsComeOnlyFromTrustedAuthorsOfTheUpstream) {
  StatsStack s("disabled");
  s.Migrate();
  const std::string up = "Up-Org/torch", tag = "dis-" + Unique();
  s.Produce("github.webhooks",
            {IssueWebhook(tag + "-1", "evil-org/x", 1, "MEMBER", "DISABLED test_other_repo (__main__.TestX)", ""),
             IssueWebhook(tag + "-2", "evil-org/x", 2, "NONE", "DISABLED test_other_repo_none (__main__.TestX)", ""),
             IssueWebhook(tag + "-3", up, 3, "NONE", "DISABLED test_stranger (__main__.TestX)", ""),
             IssueWebhook(tag + "-4", up, 4, "MEMBER", "DISABLED test_member (__main__.TestX)",
                          "Platforms: linux\n\nflaky"),
             IssueWebhook(tag + "-5", up, 5, "NONE", "DISABLED test_member (__main__.TestX)", "no platforms line"),
             IssueWebhook(tag + "-6", up, 6, "MEMBER", "DISABLED test_long_ago (__main__.TestX)", "",
                          31LL * 86'400'000)});
  uint16_t port = s.Start(1, {{"RELAY_STATS_CI_FILES_UPSTREAMS", "up-org/torch"},
                              {"RELAY_STATS_CI_DISABLED_DAYS", "30"},
                              {"RELAY_STATS_CI_FILES_INTERVAL", "1s"}});
  ASSERT_NE(port, 0) << ReadFile(s.Log(1));
  ASSERT_EQ(s.WaitCount("SELECT count() FROM webhook_deliveries WHERE event = 'issues'", 6), 6);
  // A refresh that started after the last row landed.
  auto deadline = std::chrono::steady_clock::now() + 60s;
  while (std::chrono::steady_clock::now() < deadline &&
         testing::MetricValue(port, "relay_stats_ci_disabled_issues{verdict=\"untrusted_author\"}") != 2) {
    std::this_thread::sleep_for(200ms);
  }
  auto got = HttpClient("127.0.0.1", port).Get("/ci/disabled-tests-condensed.json");
  ASSERT_EQ(got.status, 200) << got.body;
  EXPECT_EQ(json::parse(got.body), json::parse(R"j({"test_member (__main__.TestX)":
      ["4", "https://github.com/Up-Org/torch/issues/4", ["linux"]]})j"));
  EXPECT_EQ(testing::MetricValue(port, "relay_stats_ci_disabled_issues{verdict=\"other_repository\"}"), 0)
      << "the SQL reads only the upstreams' deliveries";
  EXPECT_EQ(testing::MetricValue(port, "relay_stats_ci_disabled_issues{verdict=\"disabled\"}"), 1);
  EXPECT_GE(testing::MetricValue(
                port, "relay_stats_ci_file_refreshes_total{file=\"disabled-tests-condensed.json\",result=\"ok\"}"),
            1);
}

// --- the tier report ----------------------------------------------------------

// Seeds one repo's history straight into ClickHouse: `level` dispatches
// since `days_at_level` days ago (L1 before that), and `jobs` completed jobs
// over the last 6 days, each `e2e_s` end to end with `queue_s` queueing,
// of which the first `over_3h` take 4 h, `timeouts` timed out and
// `failures` failed.
struct History {
  std::string repo;
  int level = 2;
  int days_at_level = 40;
  int jobs = 200;
  int e2e_s = 2 * 3600;
  int queue_s = 29 * 60;
  int over_3h = 0, timeouts = 0, failures = 0;
};

void Seed(StatsStack& s, const History& h) {
  int64_t now = NowMs() / 1000;
  std::string rows;
  auto dispatch = [&](const std::string& id, int level, int64_t at) {
    rows += "('" + id + "', '" + h.repo + "', " + std::to_string(level) + ", toDateTime(" + std::to_string(at) + "), " +
            std::to_string(at * 1000) + ", 1),";
  };
  dispatch(h.repo + "-l1", 1, now - (h.days_at_level + 5) * 86400);
  dispatch(h.repo + "-first", h.level, now - h.days_at_level * 86400);
  dispatch(h.repo + "-last", h.level, now - 3600);
  rows.pop_back();
  s.Query("INSERT INTO dispatches (request_id, downstream_repo, level, dispatched_at, dispatched_at_ms, version) VALUES " +
          rows);
  rows.clear();
  for (int i = 0; i < h.jobs; ++i) {
    int e2e = i < h.over_3h ? 4 * 3600 : h.e2e_s;
    int64_t completed = now - 6 * 86400 + static_cast<int64_t>(i) * (5 * 86400 / h.jobs);
    bool timed_out = i >= h.over_3h && i < h.over_3h + h.timeouts;
    bool failed = i >= h.over_3h + h.timeouts && i < h.over_3h + h.timeouts + h.failures;
    std::string conclusion = timed_out ? "timed_out" : failed ? "failure" : "success";
    rows += "('" + h.repo + "-" + std::to_string(i) + "', 'completed', '" + h.repo + "', '" + conclusion + "', " +
            std::to_string(h.queue_s) + ", " + std::to_string(e2e - h.queue_s) + ", toDateTime(" +
            std::to_string(completed - e2e) + "), toDateTime(" + std::to_string(completed) + "), " +
            std::to_string(h.level) + ", 1, " + (failed ? "1" : "0") + "),";
  }
  rows.pop_back();
  s.Query("INSERT INTO crcr_workflow_job (id, status, downstream_repo, conclusion, queue_time, execution_time, "
          "dispatched_at, completed_at, downstream_repo_level, version, failed_tests) VALUES " +
          rows);
}

TEST(StatsIt, TierReportVerdictsJustInsideAndJustOutsideEachThreshold) {
  StatsStack s("tier");
  s.Migrate();
  std::string o = "tier" + Unique() + "/";
  // Just inside every L3 rule: 200 jobs, p50 2 h 59 min, 1 over 3 h
  // (0.5%), mean queue 29 min, 1 timeout (0.5%), 90.0% passing (180: the
  // job over 3 h passed; 1 timeout, 19 failures), 31 days at L2. Each
  // other case moves one figure just outside, keeping the others.
  History inside{o + "inside", 2, 31, 200, 2 * 3600 + 59 * 60, 29 * 60, 1, 1, 19};
  std::vector<std::pair<History, std::string>> cases = {
      {inside, "promote-to-L3"},
      {[&] { History h = inside; h.repo = o + "young"; h.days_at_level = 29; return h; }(), "time_at_l2"},
      {[&] { History h = inside; h.repo = o + "slow"; h.e2e_s = 3 * 3600 + 60; return h; }(), "p50_e2e"},
      {[&] { History h = inside; h.repo = o + "long"; h.over_3h = 2; return h; }(), "over_3h"},
      {[&] { History h = inside; h.repo = o + "queued"; h.queue_s = 31 * 60; return h; }(), "queue"},
      {[&] { History h = inside; h.repo = o + "timeouts"; h.timeouts = 2; h.failures = 18; return h; }(), "timeouts"},
      {[&] { History h = inside; h.repo = o + "red"; h.failures = 20; return h; }(), "pass_rate"},
      {[&] { History h = inside; h.repo = o + "l3-ok"; h.level = 3; return h; }(), "keeps-L3"},
      {[&] { History h = inside; h.repo = o + "l3-red"; h.level = 3; h.failures = 40; return h; }(), "demote-to-L2"},
      {[&] { History h = inside; h.repo = o + "l1"; h.level = 1; return h; }(), "not-eligible"},
  };
  for (const auto& [h, want] : cases) Seed(s, h);
  std::string out;
  ASSERT_EQ(s.Command("tier-report --json", &out), 0) << out;
  json::value report = json::parse(out);
  std::map<std::string, json::object> by_repo;
  for (const auto& r : report.at("repos").as_array()) by_repo[std::string(r.at("repo").as_string())] = r.as_object();
  for (const auto& [h, want] : cases) {
    ASSERT_TRUE(by_repo.count(h.repo)) << h.repo;
    const json::object& r = by_repo[h.repo];
    std::string verdict(r.at("verdict").as_string());
    if (want.find('-') != std::string::npos) {
      EXPECT_EQ(verdict, want) << h.repo << ": " << json::serialize(r);
    } else {
      // One rule just outside: stays at L2, and that rule is named.
      EXPECT_EQ(verdict, "stays-L2") << h.repo;
      EXPECT_THAT(std::string(r.at("reason").as_string()), HasSubstr(want)) << h.repo;
    }
  }
  // The table form names every repo too.
  ASSERT_EQ(s.Command("tier-report", &out), 0);
  for (const auto& [h, want] : cases) EXPECT_THAT(out, HasSubstr(h.repo));
}

}  // namespace
}  // namespace relay
