// Records to rows: what each converter accepts, what it refuses (poison),
// and that a refused record adds nothing.
#include <gtest/gtest.h>

#include <cmath>

#include "relay/stats/rows.h"
#include "relay/v1/cluster.pb.h"
#include "relay/v1/collector.pb.h"
#include "relay/v1/dispatch.pb.h"
#include "relay/v1/github.pb.h"
#include "relay/v1/webhook.pb.h"

namespace relay::stats {
namespace {

constexpr int64_t kNowMs = 1'790'000'000'000;  // 2026-09

std::string WorkflowJobBody(std::string_view status, std::string_view started = "\"2026-09-21T10:00:05Z\"") {
  return std::string(R"({"action":"in_progress","workflow_job":{"id":42,"run_id":7,"run_attempt":1,"name":"build",)") +
         R"("workflow_name":"CI","head_sha":"abc","head_branch":"main","status":")" + std::string(status) +
         R"(","conclusion":null,"created_at":"2026-09-21T10:00:00Z","started_at":)" + std::string(started) +
         R"(,"completed_at":null,"labels":["linux","x64"],"runner_id":3,"runner_name":"r1",)"
         R"("runner_group_name":"default","steps":[{"name":"checkout","status":"completed","conclusion":"success",)"
         R"("number":1,"started_at":"2026-09-21T10:00:06Z","completed_at":"2026-09-21T10:00:07Z"}]},)"
         R"("repository":{"full_name":"o/r","id":1}})";
}

std::string Webhook(std::string event, std::string body, std::string content_type = "application/json") {
  v1::WebhookRecord w;
  w.set_delivery_id("d-1");
  w.set_event(std::move(event));
  w.set_repository("o/r");
  w.set_received_at_unix_ms(kNowMs);
  w.set_body(std::move(body));
  w.set_content_type(std::move(content_type));
  return w.SerializeAsString();
}

TEST(Rows, WorkflowJobWebhookGivesADeliveryAndAJob) {
  Rows rows;
  ASSERT_TRUE(ConvertWebhook(Webhook("workflow_job", WorkflowJobBody("in_progress")), rows).ok());
  EXPECT_EQ(rows.For(kWebhookDeliveries).rows(), 1u);
  EXPECT_EQ(rows.For(kWorkflowJob).rows(), 1u);
  EXPECT_EQ(rows.For(kWorkflowRun).rows(), 0u);
}

TEST(Rows, FormEncodedWebhookIsDecoded) {
  Rows rows;
  std::string body = "payload=" + std::string(R"(%7B%22action%22%3A%22opened%22%7D)");
  ASSERT_TRUE(ConvertWebhook(Webhook("issues", body, "application/x-www-form-urlencoded"), rows).ok());
  EXPECT_NE(rows.For(kWebhookDeliveries).data().find(R"({"action":"opened"})"), std::string::npos);
}

TEST(Rows, BadWorkflowJobPayloadIsPoisonAndAddsNothing) {
  Rows rows;
  EXPECT_FALSE(ConvertWebhook(Webhook("workflow_job", "{not json"), rows).ok());
  EXPECT_FALSE(ConvertWebhook(Webhook("workflow_job", R"({"action":"queued"})"), rows).ok());
  EXPECT_FALSE(ConvertWebhook(Webhook("workflow_job", WorkflowJobBody("queued", "\"yesterday\"")), rows).ok());
  EXPECT_FALSE(ConvertWebhook("\xff\xff not a proto", rows).ok());
  EXPECT_EQ(rows.rows(), 0u);
}

TEST(Rows, JobVersionRanksStatusAboveTime) {
  // completed received before in_progress must still win: compare the
  // version column, the last 8 bytes of each row.
  Rows a, b;
  ASSERT_TRUE(ConvertWebhook(Webhook("workflow_job", WorkflowJobBody("completed")), a).ok());
  v1::WebhookRecord later;
  later.ParseFromString(Webhook("workflow_job", WorkflowJobBody("in_progress")));
  later.set_received_at_unix_ms(kNowMs + 60'000);
  ASSERT_TRUE(ConvertWebhook(later.SerializeAsString(), b).ok());
  auto version = [](Rows& r) {
    const std::string& d = r.For(kWorkflowJob).data();
    uint64_t v;
    memcpy(&v, d.data() + d.size() - 8, 8);
    return v;
  };
  EXPECT_GT(version(a), version(b));
}

TEST(Rows, TestReportGivesARowPerCaseAndMarksItsWindow) {
  v1::TestReportBatch b;
  b.set_upload_id("u1");
  b.set_job_id("j1");
  b.set_repo("o/r");
  b.set_uploaded_at_unix_ms(kNowMs);
  for (int i = 0; i < 3; ++i) {
    auto* c = b.add_cases();
    c->set_file("test_x.py");
    c->set_name("t" + std::to_string(i));
    c->set_duration_s(0.5);
    c->set_outcome(i == 2 ? "failed" : "passed");
  }
  Rows rows;
  ASSERT_TRUE(ConvertTestReport(b.SerializeAsString(), rows).ok());
  EXPECT_EQ(rows.For(kTestResults).rows(), 3u);
  ASSERT_EQ(rows.windows().size(), 1u);
  EXPECT_EQ(rows.windows().begin()->day, kNowMs / 86'400'000);

  // The report's stable time places it, not the upload's: the same report
  // uploaded again after midnight is the same rows (same day, same key).
  b.set_report_time_unix_ms(kNowMs - 86'400'000);
  Rows placed;
  ASSERT_TRUE(ConvertTestReport(b.SerializeAsString(), placed).ok());
  b.set_uploaded_at_unix_ms(kNowMs + 86'400'000);
  Rows again;
  ASSERT_TRUE(ConvertTestReport(b.SerializeAsString(), again).ok());
  EXPECT_EQ(placed.windows().begin()->day, kNowMs / 86'400'000 - 1);
  EXPECT_EQ(again.windows().begin()->day, placed.windows().begin()->day);
  b.set_uploaded_at_unix_ms(kNowMs);
  b.set_report_time_unix_ms(0);

  b.mutable_cases(1)->set_outcome("maybe");
  Rows bad;
  EXPECT_FALSE(ConvertTestReport(b.SerializeAsString(), bad).ok());
  b.mutable_cases(1)->set_outcome("passed");
  b.mutable_cases(1)->set_duration_s(-1);
  EXPECT_FALSE(ConvertTestReport(b.SerializeAsString(), bad).ok());
  b.mutable_cases(1)->set_duration_s(1);
  b.set_upload_id("");
  EXPECT_FALSE(ConvertTestReport(b.SerializeAsString(), bad).ok());
  EXPECT_EQ(bad.rows(), 0u);
  EXPECT_TRUE(bad.windows().empty());
}

TEST(Rows, JobResultNeedsItsIdentityAndSaneNumbers) {
  v1::JobResult j;
  j.set_job_id("j1");
  j.set_version(3);
  j.mutable_trusted()->set_verified_repo("o/r");
  j.mutable_trusted()->set_queue_time_ms(-1);
  j.mutable_trusted()->set_execution_time_ms(1500);
  j.mutable_reported()->add_failed_tests("t1");
  Rows rows;
  ASSERT_TRUE(ConvertJobResult(j.SerializeAsString(), rows).ok());
  EXPECT_EQ(rows.For(kJobResults).rows(), 1u);
  j.mutable_reported()->set_tests_total(-5);
  EXPECT_FALSE(ConvertJobResult(j.SerializeAsString(), rows).ok());
  j.mutable_reported()->set_tests_total(5);
  j.mutable_trusted()->set_completed_at_unix_ms(-1);
  EXPECT_FALSE(ConvertJobResult(j.SerializeAsString(), rows).ok());
  EXPECT_EQ(rows.rows(), 1u);
}

TEST(Rows, DispatchMarksTheDownstreamWindowsItsShaCanReach) {
  v1::DispatchRecord d;
  d.set_request_id("r1");
  d.set_downstream_repo("O/Down");  // as an allowlist may spell it
  d.set_level(3);
  d.set_dispatched_at_unix_ms(kNowMs);
  Rows rows;
  ASSERT_TRUE(ConvertDispatch(d.SerializeAsString(), rows).ok());
  EXPECT_EQ(rows.For(kDispatches).rows(), 1u);
  EXPECT_EQ(rows.windows().size(), 2u);
  // Repository names are keys: stored lower-cased, as GitHub compares them.
  EXPECT_EQ(rows.windows().begin()->repo, "o/down");
  EXPECT_NE(rows.For(kDispatches).data().find("o/down"), std::string::npos);
  EXPECT_EQ(rows.For(kDispatches).data().find("O/Down"), std::string::npos);
  d.set_level(300);
  EXPECT_FALSE(ConvertDispatch(d.SerializeAsString(), rows).ok());
}

TEST(Rows, OutcomesAndClusterEvents) {
  v1::GitHubOutcome o;
  o.set_request_id("r1");
  o.set_finished_at_unix_ms(kNowMs);
  v1::ClusterEvent e;
  e.set_event_id("e1");
  e.set_cluster_id("c1");
  e.set_at_unix_ms(kNowMs);
  Rows rows;
  ASSERT_TRUE(ConvertOutcome(o.SerializeAsString(), rows).ok());
  ASSERT_TRUE(ConvertClusterEvent(e.SerializeAsString(), rows).ok());
  EXPECT_EQ(rows.rows(), 2u);
  e.set_cluster_seconds(std::nan(""));
  EXPECT_FALSE(ConvertClusterEvent(e.SerializeAsString(), rows).ok());
  e.set_cluster_seconds(-1);
  EXPECT_FALSE(ConvertClusterEvent(e.SerializeAsString(), rows).ok());
  e.set_cluster_seconds(1);
  e.set_cluster_id("");
  EXPECT_FALSE(ConvertClusterEvent(e.SerializeAsString(), rows).ok());
}

// A coalesced dispatch (never sent) is also a superseded_dispatches row, for
// the HUD grid; other outcomes, and superseded ones without their commit
// (written before dispatch named it), are not.
TEST(Rows, SupersededOutcomesNameTheirCommit) {
  v1::GitHubOutcome o;
  o.set_request_id("r1");
  o.set_kind("dispatch");
  o.set_repo("O/Down");
  o.set_finished_at_unix_ms(kNowMs);
  o.set_result("done");
  o.set_head_sha("abc");
  Rows rows;
  ASSERT_TRUE(ConvertOutcome(o.SerializeAsString(), rows).ok());
  EXPECT_EQ(rows.rows(), 1u);
  o.set_result("superseded");
  o.set_head_sha("");
  ASSERT_TRUE(ConvertOutcome(o.SerializeAsString(), rows).ok());
  EXPECT_EQ(rows.rows(), 2u);
  o.set_head_sha("abc");
  o.set_upstream_repo("PyTorch/PyTorch");
  o.set_superseded_by("r2");
  ASSERT_TRUE(ConvertOutcome(o.SerializeAsString(), rows).ok());
  EXPECT_EQ(rows.rows(), 4u);
  const std::string& data = rows.For(kSupersededDispatches).data();
  EXPECT_NE(data.find("pytorch/pytorch"), std::string::npos);
  EXPECT_NE(data.find("o/down"), std::string::npos);
  EXPECT_NE(data.find("r2"), std::string::npos);
}

TEST(Rows, ConvertPicksByTopicAndRefusesOthers) {
  Topics topics;
  kafka::ConsumedRecord r;
  r.topic = "somewhere.else";
  Rows rows;
  EXPECT_FALSE(Convert(topics, r, rows).ok());
}

TEST(ParseGitHubTime, IsoTimes) {
  EXPECT_EQ(*ParseGitHubTime("2019-05-15T15:20:31Z"), 1557933631);
  EXPECT_EQ(*ParseGitHubTime("2019-05-15T17:20:31+02:00"), 1557933631);
  EXPECT_EQ(*ParseGitHubTime(""), 0);
  EXPECT_FALSE(ParseGitHubTime("1557933631").ok());
  EXPECT_FALSE(ParseGitHubTime("1900-01-01T00:00:00Z").ok());
}

}  // namespace
}  // namespace relay::stats
