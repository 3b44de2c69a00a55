#include "relay/github/webhook_key.h"

#include <gtest/gtest.h>

namespace relay::github {
namespace {

WebhookKeyFacts F(std::string_view event, std::string_view repo, int64_t number = 0, std::string_view ref = "",
                  std::string_view sha = "", int64_t id = 0) {
  WebhookKeyFacts f;
  f.event = event;
  f.repository = repo;
  f.number = number;
  f.ref = ref;
  f.sha = sha;
  f.object_id = id;
  return f;
}

std::string Ordered(const WebhookKeyFacts& f) { return WebhookKey(WebhookKeys::kOrdered, f, "guid-1"); }

TEST(WebhookKeyTest, RepositorySchemeIsTheRepositoryForEveryEvent) {
  for (std::string_view event : {"pull_request", "push", "workflow_job", "check_run", "star"}) {
    WebhookKeyFacts f = F(event, "PyTorch/PyTorch", 7, "refs/heads/main", "abc", 9);
    // As received: the partition of a running deployment's repository stays.
    EXPECT_EQ(WebhookKey(WebhookKeys::kRepository, f, "guid-1"), "PyTorch/PyTorch") << event;
  }
}

TEST(WebhookKeyTest, PullRequestEventsAndTheirCommentsShareThePullRequestsKey) {
  for (std::string_view event : {"pull_request", "pull_request_review", "pull_request_review_comment",
                                 "pull_request_review_thread", "issue_comment", "issues"}) {
    EXPECT_EQ(Ordered(F(event, "PyTorch/PyTorch", 123)), "pytorch/pytorch#123") << event;
  }
}

TEST(WebhookKeyTest, PushIsKeyedByItsRefAndStatusBySha) {
  EXPECT_EQ(Ordered(F("push", "pytorch/pytorch", 0, "refs/heads/main")), "pytorch/pytorch@refs/heads/main");
  EXPECT_EQ(Ordered(F("status", "pytorch/pytorch", 0, "", "0123abc")), "pytorch/pytorch@0123abc");
}

TEST(WebhookKeyTest, WorkflowAndCheckObjectsAreKeyedByTheirIds) {
  EXPECT_EQ(Ordered(F("workflow_job", "pytorch/pytorch", 0, "", "", 42)), "pytorch/pytorch/job:42");
  EXPECT_EQ(Ordered(F("workflow_run", "pytorch/pytorch", 0, "", "", 43)), "pytorch/pytorch/run:43");
  EXPECT_EQ(Ordered(F("check_run", "pytorch/pytorch", 0, "", "", 44)), "pytorch/pytorch/check_run:44");
  EXPECT_EQ(Ordered(F("check_suite", "pytorch/pytorch", 0, "", "", 45)), "pytorch/pytorch/check_suite:45");
  EXPECT_EQ(KeyObjectOf("workflow_job"), "workflow_job");
  EXPECT_EQ(KeyObjectOf("pull_request"), "");
}

TEST(WebhookKeyTest, LowVolumeEventsStayPerRepository) {
  EXPECT_EQ(Ordered(F("create", "pytorch/pytorch", 0, "v2.5")), "pytorch/pytorch");
  EXPECT_EQ(Ordered(F("release", "pytorch/pytorch")), "pytorch/pytorch");
}

TEST(WebhookKeyTest, AMissingFieldFallsBackToTheRepository) {
  EXPECT_EQ(Ordered(F("pull_request", "pytorch/pytorch", 0)), "pytorch/pytorch");
  EXPECT_EQ(Ordered(F("push", "pytorch/pytorch", 0, "")), "pytorch/pytorch");
  EXPECT_EQ(Ordered(F("workflow_job", "pytorch/pytorch")), "pytorch/pytorch");
  EXPECT_EQ(Ordered(F("check_run", "pytorch/pytorch", 0, "", "", -1)), "pytorch/pytorch");
}

TEST(WebhookKeyTest, NoRepositoryIsTheDeliveryIdInEitherScheme) {
  EXPECT_EQ(Ordered(F("ping", "")), "guid-1");
  EXPECT_EQ(WebhookKey(WebhookKeys::kRepository, F("ping", ""), "guid-1"), "guid-1");
}

TEST(WebhookKeyTest, ParsesTheSettingsValues) {
  WebhookKeys k = WebhookKeys::kRepository;
  EXPECT_TRUE(ParseWebhookKeys("ordered", &k));
  EXPECT_EQ(k, WebhookKeys::kOrdered);
  EXPECT_TRUE(ParseWebhookKeys("repository", &k));
  EXPECT_EQ(k, WebhookKeys::kRepository);
  EXPECT_FALSE(ParseWebhookKeys("Ordered", &k));
  EXPECT_FALSE(ParseWebhookKeys("", &k));
}

}  // namespace
}  // namespace relay::github
