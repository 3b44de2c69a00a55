// The callback body as the public action sends it, and every way it can be
// malformed.
#include "relay/collector/callback.h"

#include <gtest/gtest.h>

namespace relay::collector {
namespace {

// What report_callback.py posts: the client payload whole plus `workflow`.
std::string Body(std::string workflow_extra = "", std::string status = "\"completed\"",
                 std::string conclusion = "\"success\"", std::string event = "pull_request",
                 std::string delivery = "d-1") {
  return R"({"event_type":")" + event + R"(","delivery_id":")" + delivery +
         R"(","payload":{"action":"synchronize","number":42,"repository":{"full_name":"pytorch/pytorch"},)"
         R"("pull_request":{"number":42,"head":{"sha":"abc123","ref":"f"}}},"relay_token":"rt1.k.p.m",)"
         R"("workflow":{"schema_version":"1","status":)" + status + R"(,"conclusion":)" + conclusion +
         R"(,"name":"CI","url":"https://github.com/o/r/actions/runs/7","run_id":"7","run_attempt":"1",)"
         R"("job_name":"test 1 of 3","check_run_id":"7-1","started_at":"2026-11-23T10:00:00Z",)"
         R"("completed_at":null)" + workflow_extra + "}}";
}

TEST(Callback, ParsesWhatTheActionSends) {
  auto p = ParseCallback(Body(R"(,"test_results":{"passed":10,"failed":2,"skipped":1,"failed_tests":["a::b"]},"artifact_url":"https://x")"));
  ASSERT_TRUE(p.ok()) << p.status();
  const auto& r = p->request;
  EXPECT_EQ(r.event_type(), "pull_request");
  EXPECT_EQ(r.delivery_id(), "d-1");
  EXPECT_EQ(r.upstream_repo(), "pytorch/pytorch");
  EXPECT_EQ(r.pr_number(), 42);
  EXPECT_EQ(r.head_sha(), "abc123");
  EXPECT_EQ(p->relay_token, "rt1.k.p.m");
  EXPECT_FALSE(p->self_report);
  EXPECT_EQ(r.workflow().status(), "completed");
  EXPECT_EQ(r.workflow().conclusion(), "success");
  EXPECT_EQ(r.workflow().run_id(), "7");
  EXPECT_EQ(r.workflow().job_name(), "test 1 of 3");
  EXPECT_EQ(r.workflow().tests_total(), 13);
  EXPECT_EQ(r.workflow().failed_tests_size(), 1);
  EXPECT_EQ(r.workflow().artifact_url(), "https://x");
  auto in_progress = ParseCallback(Body("", "\"in_progress\"", "null"));
  ASSERT_TRUE(in_progress.ok()) << in_progress.status();
  EXPECT_EQ(in_progress->request.workflow().conclusion(), "");
}

TEST(Callback, PushAndNightlyTakeTheirShaFromWhereTheyHaveIt) {
  auto push = ParseCallback(R"({"event_type":"push","delivery_id":"d","payload":{"after":"fff","ref":"refs/heads/main",)"
                            R"("repository":{"full_name":"pytorch/pytorch"}},"relay_token":"t","workflow":{"schema_version":"1",)"
                            R"("status":"in_progress","conclusion":null,"run_id":"1","run_attempt":"1","job_name":"j"}})");
  ASSERT_TRUE(push.ok()) << push.status();
  EXPECT_EQ(push->request.head_sha(), "fff");
  std::string sha(40, 'a');
  auto nightly = ParseCallback(Body("", "\"completed\"", "\"failure\"", "nightly", sha));
  ASSERT_TRUE(nightly.ok()) << nightly.status();
  EXPECT_TRUE(nightly->self_report);
  EXPECT_EQ(nightly->request.head_sha(), sha);
}

TEST(Callback, RefusesMalformedBodiesWithAReason) {
  struct Case {
    std::string body, reason;
  } cases[] = {
      {"not json", "not JSON"},
      {"[1]", "not a JSON object"},
      {R"({"delivery_id":"d","workflow":{}})", "event_type is required"},
      {Body("", "\"queued\""), "workflow.status must be in_progress or completed"},
      {Body("", "\"completed\"", "null"), "workflow.conclusion must be one of"},
      {Body("", "\"completed\"", "\"great\""), "workflow.conclusion must be one of"},
      {Body("", "\"in_progress\"", "\"success\""), "conclusion must be null while in_progress"},
      {Body("", "\"in_progress\"", "null", "nightly", std::string(40, 'a')), "completed only"},
      {Body("", "\"completed\"", "\"success\"", "nightly", "not-a-sha"), "must be the upstream commit sha"},
      {Body(R"(,"test_results":{"passed":-1})"), "non-negative integer"},
      {Body(R"(,"test_results":[])"), "test_results must be an object"},
  };
  for (const auto& c : cases) {
    auto p = ParseCallback(c.body);
    ASSERT_FALSE(p.ok()) << c.body;
    EXPECT_TRUE(absl::IsInvalidArgument(p.status()));
    EXPECT_NE(p.status().message().find(c.reason), std::string_view::npos) << p.status() << " for " << c.body;
  }
  std::string no_schema = Body();
  no_schema.replace(no_schema.find("\"schema_version\":\"1\","), 21, "");
  EXPECT_FALSE(ParseCallback(no_schema).ok());
  std::string bad_run = Body();
  bad_run.replace(bad_run.find("\"run_id\":\"7\""), 12, "\"run_id\":\"7x\"");
  EXPECT_NE(ParseCallback(bad_run).status().message().find("run_id must be a string of digits"), std::string_view::npos);
  std::string zero_attempt = Body();
  zero_attempt.replace(zero_attempt.find("\"run_attempt\":\"1\""), 17, "\"run_attempt\":\"0\"");
  EXPECT_FALSE(ParseCallback(zero_attempt).ok());
  EXPECT_FALSE(ParseCallback(std::string(kMaxCallbackBytes + 1, ' ')).ok());
}

TEST(Callback, JobIdsDifferByEveryPartOfTheIdentity) {
  auto base = ParseCallback(Body())->request;
  base.set_repo("Org/Repo");
  std::string id = JobId(base);
  auto lower = base;
  lower.set_repo("org/repo");
  EXPECT_EQ(JobId(lower), id) << "repository names are case-insensitive";
  for (auto change : std::initializer_list<void (*)(v1::CallbackRequest&)>{
           [](v1::CallbackRequest& r) { r.set_delivery_id("other"); },
           [](v1::CallbackRequest& r) { r.mutable_workflow()->set_run_id("8"); },
           [](v1::CallbackRequest& r) { r.mutable_workflow()->set_run_attempt("2"); },
           [](v1::CallbackRequest& r) { r.mutable_workflow()->set_job_name("other"); },
       }) {
    auto other = base;
    change(other);
    EXPECT_NE(JobId(other), id);
  }
}

}  // namespace
}  // namespace relay::collector
