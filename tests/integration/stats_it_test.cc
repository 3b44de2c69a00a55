// relay-stats on the real Kafka broker and Debian's ClickHouse 18.16: every
// table filled from real webhook payloads (@octokit/webhooks-examples) and
// from records as dispatch and collector write them; a full replay that
// changes no query result; ClickHouse stopped mid-ingestion; poison records;
// the tier report's verdicts at each threshold; migrations applied twice;
// the disabled-tests list taking only trusted authors' upstream issues.
//
// Each test has its own topics (stats.topics.*), consumer group and
// ClickHouse database, so tests sharing the servers do not see each other.
#include "stats_it_support.h"

#include "absl/strings/str_split.h"

namespace relay {
namespace {

using namespace stats_it;

TEST(StatsIt, MigrationsAppliedTwiceChangeNothing) {
  StatsStack s("migrate");
  std::string out;
  ASSERT_EQ(s.Command("migrate --to 1", &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("applied 0001_tables.sql"));
  EXPECT_THAT(out, ::testing::Not(HasSubstr("0002")));
  ASSERT_EQ(s.Command("migrate", &out), 0);
  EXPECT_THAT(out, HasSubstr("applied 0002_rollups.sql"));
  // The HUD's views need a current server: skipped on 18.16, and said so.
  EXPECT_THAT(out, HasSubstr("skipped 0004_hud.sql: needs ClickHouse >= 23.3, the server is 18.16"));
  std::string schema_sql =
      "SELECT table, name, type, default_kind, default_expression FROM system.columns "
      "WHERE database = currentDatabase() ORDER BY table, name";
  std::string schema = s.Query(schema_sql);
  std::string ledger = s.Query("SELECT version, name, checksum FROM schema_migrations FINAL ORDER BY version");
  ASSERT_EQ(s.Command("migrate", &out), 0);
  EXPECT_THAT(out, HasSubstr("nothing to apply"));
  EXPECT_EQ(s.Query(schema_sql), schema);
  EXPECT_EQ(s.Query("SELECT version, name, checksum FROM schema_migrations FINAL ORDER BY version"), ledger);
  int64_t files = 0;
  for (const auto& f : std::filesystem::directory_iterator(Env("RELAY_ROOT") + "/deploy/clickhouse/migrations")) {
    files += f.path().extension() == ".sql";
  }
  EXPECT_EQ(s.Count("SELECT count() FROM schema_migrations FINAL"), files);
  // Going back is refused; a migration edited after it was applied is found.
  EXPECT_NE(s.Command("migrate --to 1", &out), 0);
  s.Query("INSERT INTO schema_migrations SELECT 1, '0001_tables.sql', 'edited', now() + 10");
  EXPECT_NE(s.Command("migrate", &out), 0);
}

TEST(StatsIt, FillsEveryTableAndAReplayChangesNoQueryResult) {
  StatsStack s("replay");
  s.Migrate();
  Traffic t = MakeTraffic("rp" + Unique(), 24);
  ASSERT_GT(t.workflow_jobs, 0);
  ASSERT_GT(t.workflow_runs, 0);
  ProduceTraffic(s, t);
  // Superseded snapshots are pruned every second here (10 min by default).
  std::map<std::string, std::string> prune_fast = {{"RELAY_STATS_SNAPSHOT_PRUNE_INTERVAL", "1s"}};
  uint16_t port = s.Start(1, prune_fast);
  ASSERT_NE(port, 0) << ReadFile(s.Log(1));
  ExpectTables(s, t);

  // Rows as the sources say: a real workflow_job payload's job, completed
  // (its completed payload outranks earlier ones whatever the order), with
  // labels and steps; job results at their last version; per-test rows.
  EXPECT_EQ(s.Query("SELECT status FROM workflow_job FINAL WHERE id = " + std::to_string(t.completed_job_id)),
            "completed");
  EXPECT_GT(s.Count("SELECT count() FROM workflow_job FINAL WHERE length(labels) > 0 AND length(steps.name) > 0"), 0);
  EXPECT_EQ(s.Count("SELECT count() FROM crcr_workflow_job FINAL WHERE status != 'completed'"), 0);
  EXPECT_EQ(s.Count("SELECT count() FROM crcr_workflow_job FINAL WHERE isNull(execution_time)"), 0);
  EXPECT_EQ(s.Count("SELECT count() FROM webhook_deliveries FINAL WHERE length(payload) < 2"), 0);
  EXPECT_EQ(s.Query("SELECT max(downstream_repo_level) FROM crcr_workflow_job FINAL"), "4");
  ASSERT_TRUE(s.RollupsSettled());
  // The flaky test was found through the dispatches' shas.
  EXPECT_GT(s.Count("SELECT sum(flaky_shas) FROM test_daily FINAL WHERE name = 'test_flaky'"), 0);
  EXPECT_GT(s.Count("SELECT sum(rerun_passed) FROM test_daily FINAL WHERE name = 'test_1'"), 0);

  // The HUD grid's coalesced cells: the commit that lost to a newer head is
  // a row, its two repos superseded cells naming the request sent instead;
  // sha0's repo a was also dispatched to, so it is a dispatched cell.
  std::string grid;
  ASSERT_EQ(s.Command("query commit_grid --param upstream_repo=pytorch/pytorch --param limit=100 --format TSV", &grid),
            0);
  EXPECT_THAT(grid, HasSubstr("\tcoalesced\t"));
  std::string cells;
  ASSERT_EQ(s.Command("query commit_grid_cells --param upstream_repo=pytorch/pytorch --param shas=coalesced,sha0 "
                      "--format TSVWithNames",
                      &cells),
            0);
  std::vector<std::string> lines = absl::StrSplit(cells, '\n', absl::SkipEmpty());
  ASSERT_FALSE(lines.empty());
  std::vector<std::string> names = absl::StrSplit(lines[0], '\t');
  auto column = [&](const std::string& name) {
    return static_cast<size_t>(std::find(names.begin(), names.end(), name) - names.begin());
  };
  size_t sha_at = column("head_sha"), by_at = column("superseded_by"), job_at = column("job_id");
  ASSERT_LT(by_at, names.size()) << lines[0];
  int superseded_cells = 0, sha0_rows = 0;
  for (size_t i = 1; i < lines.size(); ++i) {
    std::vector<std::string> f = absl::StrSplit(lines[i], '\t');
    ASSERT_EQ(f.size(), names.size()) << lines[i];
    if (f[sha_at] == "coalesced") {
      // The request sent instead: delivery 0's (the traffic's tag, then -up-0/).
      EXPECT_THAT(f[by_at], ::testing::StartsWith(t.repo.substr(0, t.repo.find("-org/")) + "-up-0/"));
      EXPECT_EQ(f[job_at], "") << "never sent: no job";
      ++superseded_cells;
    } else {
      EXPECT_EQ(f[by_at], "") << "sha0 was dispatched to every repo: " << lines[i];
      ++sha0_rows;
    }
  }
  EXPECT_EQ(superseded_cells, 2) << cells;
  EXPECT_GT(sha0_rows, 0) << cells;

  auto before = s.RunAllQueries(t.repo);
  EXPECT_THAT(before["pass_rate"], HasSubstr(t.repo));
  EXPECT_THAT(before["flaky_tests"], HasSubstr("test_flaky"));
  EXPECT_THAT(before["cluster_usage"], HasSubstr("ml"));
  EXPECT_THAT(before["tier-report"], HasSubstr(t.repo));

  // A full replay: a second instance in a new group reads every topic from
  // the start and inserts every row again.
  auto snapshot_rows = [&] {
    return s.Count("SELECT count() FROM test_slowest_daily") + s.Count("SELECT count() FROM test_flaky_daily");
  };
  auto latest_rows = [&] {
    int64_t n = 0;
    for (const char* table : {"test_slowest_daily", "test_flaky_daily"}) {
      n += s.Count(std::string("SELECT count() FROM ") + table + " WHERE (repo, day, computed_at_ms) IN (SELECT repo, "
                   "day, max(computed_at_ms) FROM " + table + " GROUP BY repo, day)");
    }
    return n;
  };
  ASSERT_TRUE(testing::WaitFor([&] { return snapshot_rows() == latest_rows(); }, 60s));
  int64_t snapshots_before = snapshot_rows();
  ASSERT_GT(snapshots_before, 0);

  uint16_t replay = s.Start(2, prune_fast);
  ASSERT_NE(replay, 0) << ReadFile(s.Log(2));
  auto deadline = std::chrono::steady_clock::now() + 90s;
  while (std::chrono::steady_clock::now() < deadline &&
         testing::MetricValue(replay, "relay_stats_rows_inserted_total{table=\"test_results\"}") < t.test_rows) {
    std::this_thread::sleep_for(200ms);
  }
  EXPECT_EQ(testing::MetricValue(replay, "relay_stats_rows_inserted_total{table=\"test_results\"}"), t.test_rows);
  EXPECT_EQ(testing::MetricValue(replay, "relay_stats_rows_inserted_total{table=\"crcr_workflow_job\"}"), 2 * t.jobs);
  ExpectTables(s, t);
  ASSERT_TRUE(s.RollupsSettled());
  auto after = s.RunAllQueries(t.repo);
  ASSERT_EQ(after.size(), before.size());
  for (const auto& [name, result] : before) EXPECT_EQ(after[name], result) << name;
  // The replay recomputed every window: the superseded snapshots go, so
  // the tables hold what they held before, not a second copy (issue 15).
  EXPECT_TRUE(testing::WaitFor([&] { return snapshot_rows() == latest_rows(); }, 60s))
      << snapshot_rows() << " snapshot rows, " << latest_rows() << " of the latest computations";
  EXPECT_EQ(snapshot_rows(), snapshots_before);
  EXPECT_GE(testing::MetricValue(port, "relay_stats_snapshot_prunes_total") +
                testing::MetricValue(replay, "relay_stats_snapshot_prunes_total"),
            2);

  // One computation's rows landed twice, as a retried rollup statement or
  // two instances computing a window in the same millisecond leave them
  // (CI saw the replay double one repo's flaky and slowest tests): the
  // queries still count them once.
  // Merges stopped, so the copies stay apart until the queries ran.
  for (const char* table : {"test_slowest_daily", "test_flaky_daily"}) {
    s.Query(std::string("SYSTEM STOP MERGES ") + table);
    s.Query(std::string("INSERT INTO ") + table + " SELECT * FROM " + table +
            " WHERE (repo, day, computed_at_ms) IN (SELECT repo, day, max(computed_at_ms) FROM " + table +
            " GROUP BY repo, day)");
  }
  ASSERT_GT(snapshot_rows(), snapshots_before);
  auto twice = s.RunAllQueries(t.repo);
  for (const auto& [name, result] : before) EXPECT_EQ(twice[name], result) << name << ", its rows landed twice";
}

// Issue 15, item 8: a test report uploaded again after UTC midnight (a
// retry after a 503) is the same rows, not a second set: its rows are
// placed by the report's stable time, not the upload's wall clock.
TEST(StatsIt, ATestReportUploadedAgainAfterMidnightLandsOnce) {
  StatsStack s("midnight");
  s.Migrate();
  int64_t day_ms = 86'400'000, today = NowMs() / day_ms * day_ms;
  auto upload = [&](int64_t uploaded_at) {
    v1::TestReportBatch b;
    b.set_upload_id("midnight-upload");
    b.set_job_id("midnight-job");
    b.set_repo("midnight/accel");
    b.set_uploaded_at_unix_ms(uploaded_at);
    b.set_report_time_unix_ms(today - 60'000);  // the dispatch, a minute before midnight
    b.set_batches(1);
    b.set_last(true);
    for (int i = 0; i < 5; ++i) {
      auto* c = b.add_cases();
      c->set_file("test_m.py");
      c->set_name("t" + std::to_string(i));
      c->set_duration_s(1);
      c->set_outcome("passed");
    }
    return b.SerializeAsString();
  };
  s.Produce("ci.test_reports", {{"midnight-job", upload(today - 1'000)}});   // 23:59:59
  s.Produce("ci.test_reports", {{"midnight-job", upload(today + 1'000)}});   // 00:00:01, the retry
  ASSERT_NE(s.Start(1), 0) << ReadFile(s.Log(1));
  EXPECT_EQ(s.WaitCount("SELECT count() FROM test_results WHERE upload_id = 'midnight-upload'", 10), 10);
  EXPECT_EQ(s.Count("SELECT count() FROM test_results FINAL WHERE upload_id = 'midnight-upload'"), 5);
  EXPECT_EQ(s.Count("SELECT uniqExact(day) FROM test_results WHERE upload_id = 'midnight-upload'"), 1);
}

TEST(StatsIt, ClickHouseStoppedMidIngestionLosesAndDuplicatesNothing) {
  StatsStack s("chdown");
  s.Migrate();
  // Inserts of 7,000 rows: a batch splits into many chunks, each inserted
  // while the next is converted, so ClickHouse stops between and during
  // pipelined inserts.
  uint16_t port = s.Start(1, {{"RELAY_CLICKHOUSE_TIMEOUT", "5s"}, {"RELAY_STATS_BATCH_ROWS", "7000"}});
  ASSERT_NE(port, 0) << ReadFile(s.Log(1));
  auto wave = [&](int first, int count) {
    std::vector<std::pair<std::string, std::string>> records;
    for (int u = first; u < first + count; ++u) {
      v1::TestReportBatch b;
      b.set_upload_id("up" + std::to_string(u));
      b.set_job_id("job" + std::to_string(u));
      b.set_repo("chdown/accel");
      b.set_uploaded_at_unix_ms(NowMs());
      for (int c = 0; c < 1000; ++c) {
        auto* tc = b.add_cases();
        tc->set_file("test_" + std::to_string(c % 20) + ".py");
        tc->set_name("t" + std::to_string(c));
        tc->set_duration_s(0.5);
        tc->set_outcome("passed");
      }
      records.emplace_back(b.job_id(), b.SerializeAsString());
    }
    s.Produce("ci.test_reports", std::move(records));
  };
  wave(0, 100);
  // Some landed; then ClickHouse goes away while more records come.
  ASSERT_GT(s.WaitCount("SELECT least(count(), 1) FROM test_results", 1), 0);
  ASSERT_EQ(testing::RunCommand(Env("RELAY_ROOT") + "/tools/clickhouse/clickhouse-dev stop " + s.clickhouse_dir()), 0);
  wave(100, 100);
  auto deadline = std::chrono::steady_clock::now() + 30s;
  while (std::chrono::steady_clock::now() < deadline && HttpClient("127.0.0.1", port).Get("/readyz").status == 200) {
    std::this_thread::sleep_for(200ms);
  }
  HttpClient probe("127.0.0.1", port);
  auto ready = probe.Get("/readyz");
  EXPECT_EQ(ready.status, 503);
  EXPECT_THAT(ready.body, HasSubstr("clickhouse"));
  std::this_thread::sleep_for(3s);  // inserts fail and back off meanwhile
  ASSERT_EQ(testing::RunCommand(Env("RELAY_ROOT") + "/tools/clickhouse/clickhouse-dev start " + s.clickhouse_dir()), 0);
  EXPECT_EQ(s.WaitCount("SELECT count() FROM test_results FINAL", 200'000, 120s), 200'000);
  EXPECT_EQ(s.Count("SELECT uniqExact(upload_id, seq, idx) FROM test_results"), 200'000);
  EXPECT_GT(testing::MetricValue(port, "relay_stats_clickhouse_errors_total{code=\"UNAVAILABLE\",op=\"insert\"}"), 0);
  deadline = std::chrono::steady_clock::now() + 15s;  // readiness is re-checked every 5 s
  while (std::chrono::steady_clock::now() < deadline && HttpClient("127.0.0.1", port).Get("/readyz").status != 200) {
    std::this_thread::sleep_for(200ms);
  }
  EXPECT_EQ(HttpClient("127.0.0.1", port).Get("/readyz").status, 200);
}

TEST(StatsIt, PoisonRecordsGoToTheDeadLetterTopicAndTheRestLands) {
  StatsStack s("poison");
  s.Migrate();
  Traffic t = MakeTraffic("ps" + Unique(), 2);
  s.Produce("ci.results", {{"bad-1", "\xff\xfe not a protobuf"}});
  v1::JobResult nameless;
  nameless.set_version(1);
  s.Produce("ci.results", {{"bad-2", nameless.SerializeAsString()}});
  s.Produce("ci.results", t.results);
  v1::TestReportBatch odd;
  odd.set_upload_id("odd");
  odd.set_repo("o/r");
  odd.set_uploaded_at_unix_ms(NowMs());
  odd.add_cases()->set_outcome("exploded");
  s.Produce("ci.test_reports", {{"bad-3", odd.SerializeAsString()}});
  s.Produce("ci.test_reports", t.reports);
  ASSERT_NE(s.Start(1), 0) << ReadFile(s.Log(1));
  EXPECT_EQ(s.WaitCount("SELECT count() FROM crcr_workflow_job FINAL", t.jobs), t.jobs);
  EXPECT_EQ(s.WaitCount("SELECT count() FROM test_results FINAL", t.test_rows), t.test_rows);
  std::string error;
  std::vector<kafka::ConsumedRecord> dead;
  for (auto until = std::chrono::steady_clock::now() + 30s; dead.size() < 2 && std::chrono::steady_clock::now() < until;) {
    dead = testing::ReadTopic(testing::FixtureBootstrap(), s.Topic("ci.results") + ".dlq", 10s, &error);
    if (dead.size() < 2) std::this_thread::sleep_for(200ms);
  }
  ASSERT_EQ(dead.size(), 2u) << error;
  std::set<std::string> reasons;
  for (const auto& r : dead) reasons.insert(r.FindHeader(kafka::kDlqReasonHeader) ? *r.FindHeader(kafka::kDlqReasonHeader) : "");
  EXPECT_THAT(reasons, ::testing::Contains(HasSubstr("not a relay.v1.JobResult")));
  EXPECT_THAT(reasons, ::testing::Contains(HasSubstr("without job id")));
  // Dead letters are written once their batch's rows landed: wait for them.
  std::vector<kafka::ConsumedRecord> dead_reports;
  auto deadline = std::chrono::steady_clock::now() + 30s;
  while (dead_reports.empty() && std::chrono::steady_clock::now() < deadline) {
    dead_reports = testing::ReadTopic(testing::FixtureBootstrap(), s.Topic("ci.test_reports") + ".dlq", 10s, &error);
    if (dead_reports.empty()) std::this_thread::sleep_for(200ms);
  }
  ASSERT_EQ(dead_reports.size(), 1u) << error;
  EXPECT_THAT(*dead_reports[0].FindHeader(kafka::kDlqReasonHeader), HasSubstr("unknown outcome \"exploded\""));
}

// Issue 15, item 5: a consumer loop that ends (here: a poison record whose
// dead-letter topic does not exist, so it can be neither dead-lettered nor
// skipped) must not leave a process that looks alive and takes requests: it
// logs why, fails /healthz, drains and exits 1 for its orchestrator to
// restart it. Nothing of the record is committed.
TEST(StatsIt, AConsumerThatStopsForGoodTakesTheProcessDownWithExitCode1) {
  StatsStack s("fatal", /*dead_letter_topics=*/false);
  s.Migrate();
  s.Produce("ci.results", {{"bad-1", "\xff\xfe not a protobuf"}});
  s.Start(1);
  EXPECT_EQ(s.proc(1).Wait(90s), 1) << ReadFile(s.Log(1));
  std::string log = ReadFile(s.Log(1));
  EXPECT_THAT(log, HasSubstr("a part of the service stopped for good"));
  EXPECT_THAT(log, HasSubstr("neither dead-lettered nor skipped"));
}

}  // namespace
}  // namespace relay
