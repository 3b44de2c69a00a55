// `tools/dev up` brings the whole stack up on the embedded default (real
// Kafka broker, ClickHouse, relay-intake), drives every real sample webhook
// through it and shows them in the topic; `status` prints the endpoints;
// `down` stops everything.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "support/http_client.h"
#include "support/subprocess.h"

namespace relay {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;

TEST(DevUpE2E, UpDrivesRealWebhooksIntoTheTopicStatusAndDown) {
  std::string root = testing::Env("RELAY_ROOT");
  std::string dev_dir = testing::Env("RELAY_DEV_DIR");
  ASSERT_FALSE(dev_dir.empty());
  // A clean slate, as on a fresh clone (a stack left by a crashed run goes too).
  testing::RunCommand(root + "/tools/dev down >/dev/null 2>&1; rm -rf '" + dev_dir + "'");
  std::string out;
  int rc = testing::RunCommand(root + "/tools/dev up 2>&1", &out);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr("posting 329 real GitHub webhook payloads"));
  EXPECT_THAT(out, HasSubstr("HTTP 202: 329"));
  EXPECT_THAT(out, HasSubstr("(329 new)"));
  EXPECT_THAT(out, HasSubstr("pull_request"));
  // relay-dispatch fanned the upstream's 12 relevant events (9 pull_request
  // opened/reopened/synchronize/closed, 3 pushes) out to the 8 dev repos.
  EXPECT_THAT(out, HasSubstr("fake GitHub received 96 repository_dispatch calls"));
  EXPECT_THAT(out, HasSubstr("dev-org/l4-rocm"));
  // The canary downstream answered each dispatch through relay-collector,
  // and every answer was the one the state machine prescribes.
  EXPECT_THAT(out, HasSubstr("canary downstream answered 96 dispatches"));
  EXPECT_THAT(out, HasSubstr("\n0 unexpected answers"));
  EXPECT_THAT(out, HasSubstr("outcome=\"accepted\""));
  EXPECT_THAT(out, HasSubstr("test cases reported in JUnit uploads"));
  EXPECT_THAT(out, HasSubstr("relay_collector_test_cases_total"));
  // relay-stats closed the loop: rows in ClickHouse, dashboards read back.
  EXPECT_THAT(out, HasSubstr("applied 0002_rollups.sql"));
  EXPECT_THAT(out, ::testing::ContainsRegex("[1-9][0-9]*\ttest_results"));
  // 329 corpus payloads and 69 of the pytorch/pytorch-shaped sample traffic.
  EXPECT_THAT(out, HasSubstr("posted 69 pytorch/pytorch-shaped webhooks"));
  EXPECT_THAT(out, HasSubstr(": 69 accepted"));
  EXPECT_THAT(out, ::testing::ContainsRegex("398\twebhook_deliveries"));
  EXPECT_THAT(out, ::testing::ContainsRegex("[1-9][0-9]*\tcrcr_workflow_job"));
  EXPECT_THAT(out, HasSubstr("Pass rate per downstream repo"));
  EXPECT_THAT(out, HasSubstr("│ dev-org/l4-cuda"));
  EXPECT_THAT(out, ::testing::ContainsRegex("dev-org/l4-cuda +4 .*(keeps-L4|demote-to-L2)"));
  // The PyTorch HUD's own queries, unchanged, over the stack's data (copied
  // to chDB: they need a current ClickHouse), checked against relay's tables.
  EXPECT_THAT(out, HasSubstr("skipped 0004_hud.sql: needs ClickHouse >= 23.3"));
  EXPECT_THAT(out, HasSubstr("ok   hud_query (one row by hand)"));
  EXPECT_THAT(out, HasSubstr("ok   commit_jobs_query (one row by hand)"));
  EXPECT_THAT(out, HasSubstr("ok   crcr_hud_results (one row by hand)"));
  EXPECT_THAT(out, HasSubstr("ok   flaky_tests/ind_info (one row by hand)"));
  // ... and the ones about pytorch/pytorch's own workflows, over the sample
  // traffic in its shape.
  for (const char* q : {"master_commit_red", "tts_avg", "time_to_signal", "queued_jobs", "ttrs_percentiles",
                        "queue_times_historical", "disabled_tests"}) {
    EXPECT_THAT(out, HasSubstr(std::string("ok   ") + q + " (one row by hand)")) << q;
  }
  // Migration 6: the tables relay feeds, row by row against its own tables,
  // and every one of the HUD's 192 queries (9 cannot run on a current
  // ClickHouse: check-hud names each with its reason).
  EXPECT_THAT(out, HasSubstr("skipped 0006_hud_pages.sql: needs ClickHouse >= 23.3"));
  for (const char* t : {"issue_comment", "push (commits, head_commit.url)",
                        "workflow_job (workflow_created_at, _inserted_at)", "default.test_run_s3",
                        "tests.distinct_names", "misc.runner_cost", "merges", "filter_forced_merge_pr"}) {
    EXPECT_THAT(out, HasSubstr(std::string("ok   ") + t + ":")) << t;
  }
  EXPECT_THAT(out, HasSubstr("ok   all queries: 183 of 192 run on relay's schema, 9 do not"));
  EXPECT_THAT(out, HasSubstr(" 0 failed"));
  // relay's Grafana dashboards: every panel's SQL on this data, every
  // metric their PromQL reads present in the services' /metrics.
  EXPECT_THAT(out, HasSubstr("ok   PromQL: promtool parses all"));
  EXPECT_THAT(out, HasSubstr("ok   relay-health.json metrics 'GitHub budget'"));
  EXPECT_THAT(out, ::testing::ContainsRegex("check-dashboards: [1-9][0-9]* of [0-9]+ ClickHouse queries returned rows"));
  EXPECT_THAT(out, ::testing::ContainsRegex("check-dashboards: took [0-9.]+s; [1-9][0-9]* passed, 0 failed"));
  // relay-lifecycle: the runner pool follows the workflow_job webhooks up
  // to its max and back to zero; a real Ray cluster runs a real Ray job.
  EXPECT_THAT(out, HasSubstr("3 jobs queued     -> 3 runners wanted, 3 runner processes"));
  EXPECT_THAT(out, HasSubstr("6 jobs queued     -> 4 runners wanted, 4 runner processes (max 4)"));
  EXPECT_THAT(out, HasSubstr("after the delay   -> 0 runners wanted, 0 runner processes"));
  EXPECT_THAT(out, ::testing::ContainsRegex("job j[0-9a-f]+: SUCCEEDED"));
  EXPECT_THAT(out, HasSubstr("nodes: 2"));
  EXPECT_THAT(out, HasSubstr("sum of squares 0..99 on the cluster: 328350"));
  EXPECT_THAT(out, ::testing::ContainsRegex("cluster c[0-9a-f]+ deleted: TERMINATED"));

  // The CI files relay-stats publishes, recomputed from ClickHouse by
  // check-ci-files, each answering 304 to its ETag.
  for (const char* f : {"test-times.json", "test-class-times.json", "slow-tests.json", "flaky-tests.json"}) {
    EXPECT_THAT(out, ::testing::ContainsRegex(std::string(f) + ": [1-9][0-9]* entries, matching ClickHouse; 304 to its ETag"));
  }
  EXPECT_THAT(out, HasSubstr("disabled-tests-condensed.json: 1 entries, matching ClickHouse; 304 to its ETag"));
  // The redelivery reconciler has GitHub deliver the failed webhook again.
  EXPECT_THAT(out, ::testing::ContainsRegex("[0-9]+ failed, 0 never recorded, 1 redeliveries requested"));
  EXPECT_THAT(out, ::testing::ContainsRegex("dev-redeliver-[0-9]+-failed is now in github.webhooks"));

  std::string status;
  ASSERT_EQ(testing::RunCommand(root + "/tools/dev status", &status), 0) << status;
  EXPECT_THAT(status, HasSubstr("CI_FILES_URL=http://127.0.0.1:"));
  EXPECT_THAT(status, HasSubstr("KAFKA_BOOTSTRAP=127.0.0.1:"));
  EXPECT_THAT(status, HasSubstr("CLICKHOUSE_URL=http://127.0.0.1:"));
  EXPECT_THAT(status, HasSubstr("WEBHOOK_SECRET="));
  EXPECT_THAT(status, HasSubstr("GITHUB_API_URL=http://127.0.0.1:"));
  EXPECT_THAT(status, HasSubstr("DISPATCH_URL=http://127.0.0.1:"));
  EXPECT_THAT(status, HasSubstr("STATS_URL=http://127.0.0.1:"));
  EXPECT_THAT(status, ::testing::ContainsRegex("LIFECYCLE_GRPC=127.0.0.1:[1-9]"));
  EXPECT_THAT(status, ::testing::ContainsRegex("LIFECYCLE_TOKEN=[0-9a-f]{48}"));
  EXPECT_THAT(status, HasSubstr("CALLBACK_URL=http://127.0.0.1:"));
  EXPECT_THAT(status, HasSubstr("TEST_REPORT_URL=http://127.0.0.1:"));
  EXPECT_THAT(status, ::testing::ContainsRegex("COLLECTOR_GRPC=127.0.0.1:[1-9]"));
  EXPECT_THAT(status, HasSubstr("OIDC_JWKS_FILE="));
  EXPECT_THAT(status, HasSubstr("HUD_URL=http://127.0.0.1:"));
  // up's summary ends with the HUD to open.
  EXPECT_THAT(out, ::testing::ContainsRegex("open HUD_URL=http://127.0.0.1:[0-9]+/hud\n$"));

  // relay's CI HUD in a real browser (Debian's Chromium, headless) over the
  // stack's data: every page, the grid cell by cell against ClickHouse, the
  // charts' points, a silent console, bad parameters never a 500; and the
  // README's screenshots.
  {
    auto value = [&](const std::string& key) {
      auto p = status.find(key + "=");
      return p == std::string::npos ? std::string() : status.substr(p + key.size() + 1, status.find('\n', p) - p - key.size() - 1);
    };
    std::string browser;
    int brc = testing::RunCommand("/usr/bin/python3 " + root + "/tests/hud/browser_test.py --hud '" + value("HUD_URL") +
                                      "' --clickhouse '" + value("CLICKHOUSE_URL") + "' --screenshots '" + dev_dir +
                                      "/hud-screenshots' 2>&1",
                                  &browser);
    EXPECT_EQ(brc, 0) << browser;
    EXPECT_THAT(browser, ::testing::ContainsRegex("browser test: [1-9][0-9]* passed, 0 failed"));
  }
  auto pos = status.find("INTAKE_URL=http://127.0.0.1:");
  ASSERT_NE(pos, std::string::npos) << status;
  uint16_t port = static_cast<uint16_t>(std::stoi(status.substr(pos + 28)));
  EXPECT_EQ(testing::HttpClient("127.0.0.1", port).Get("/readyz").status, 200);

  // A second `up` is idempotent: the stack stays, the sample runs again.
  out.clear();
  ASSERT_EQ(testing::RunCommand(root + "/tools/dev up 2>&1", &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("(329 new)"));
  // 329 corpus payloads a run, the 69 of the sample pytorch/pytorch
  // traffic (posted after this count), plus the 12 workflow_job webhooks
  // the runner-pool demonstration posts, plus the 2 star webhooks of the
  // redelivery demonstration (the one delivered, the one redelivered).
  EXPECT_THAT(out, HasSubstr("holds 741 records"));
  EXPECT_THAT(out, HasSubstr("fake GitHub received 96 repository_dispatch calls"));
  EXPECT_THAT(out, HasSubstr("canary downstream answered 96 dispatches"));
  EXPECT_THAT(out, HasSubstr("\n0 unexpected answers"));

  // Operators: relayctl sees every service ready and no dead letter; a
  // replay of every replay-safe topic from its start changes no dashboard
  // query's result and makes no GitHub call.
  std::string ops;
  EXPECT_EQ(testing::RunCommand(root + "/tools/dev relayctl --no-progress status 2>&1", &ops), 0) << ops;
  EXPECT_THAT(ops, ::testing::ContainsRegex("relay-stats +ci.test_reports +Stable"));
  EXPECT_THAT(ops, ::testing::ContainsRegex("github.webhooks.dlq +0 +0"));
  ops.clear();
  EXPECT_EQ(testing::RunCommand(root + "/tools/dev replay-check 2>&1", &ops), 0) << ops;
  EXPECT_THAT(ops, HasSubstr("replay-check: every query's result unchanged, no GitHub call"));

  ASSERT_EQ(testing::RunCommand(root + "/tools/dev down 2>&1"), 0);
  EXPECT_NE(testing::RunCommand(root + "/tools/dev status 2>/dev/null"), 0);
  EXPECT_EQ(testing::HttpClient("127.0.0.1", port, std::chrono::seconds(2)).Get("/healthz").status, 0);
}

}  // namespace
}  // namespace relay
