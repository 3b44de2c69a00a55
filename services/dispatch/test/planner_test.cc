// The event rules on GitHub-shaped payloads: what fans out, what becomes a
// label fact, what re-runs, what is ignored, what is poison, and slimming.
#include "relay/dispatch/planner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "relay/base/digest.h"
#include "relay/github/webhook_signature.h"

namespace relay::dispatch {
namespace {

using ::testing::HasSubstr;
namespace json = boost::json;

constexpr char kAllowlist[] = R"(
L1: [acme/l1]
L2: [acme/l2]
L3:
  xpu:
    intel/l3: [oncall]
L4: [amd/l4]
)";
constexpr char kKeys[] = "signing_key: k\nkeys:\n  k: planner-test-secret-0123456789-0123456789\n";

class PlannerTest : public ::testing::Test {
 protected:
  PlannerTest()
      : list_(*allowlist::Allowlist::Parse(kAllowlist, "test")), keys_(*auth::RelayTokenKeys::Parse(kKeys, "test")) {
    options_.upstream_repo = "pytorch/pytorch";
    options_.app_id = "4242";
  }
  v1::WebhookRecord Record(const std::string& event, const std::string& body, const std::string& repo = "pytorch/pytorch") {
    v1::WebhookRecord r;
    r.set_delivery_id("d-" + event);
    r.set_event(event);
    r.set_repository(repo);
    r.set_body(body);
    r.set_content_type("application/json");
    auto digest = Sha256(body);
    r.set_body_sha256(digest.data(), digest.size());
    return r;
  }
  absl::StatusOr<Plan> PlanOf(const v1::WebhookRecord& r) { return PlanWebhook(r, list_, keys_, options_, 1'700'000'000'000); }

  static std::string PullRequest(const std::string& action, const std::string& labels = "[]", const std::string& extra = "") {
    return R"({"action":")" + action + R"(","number":7,"pull_request":{"number":7,"head":{"sha":"abc123","ref":"feature"},)"
           R"("base":{"sha":"def456","ref":"main"},"labels":)" + labels + R"(},"repository":{"full_name":"pytorch/pytorch"})" + extra + "}";
  }

  allowlist::Allowlist list_;
  auth::RelayTokenKeys keys_;
  PlannerOptions options_;
};

// A PR's dispatches carry the event's own time (the payload's updated_at,
// then intake's receipt): the scheduler orders two heads of one PR by it.
TEST_F(PlannerTest, PullRequestDispatchesCarryTheEventsOwnTime) {
  std::string body = PullRequest("synchronize");
  body.insert(body.find(R"("labels":)"), R"("updated_at":"2026-11-29T01:02:03Z",)");
  auto r = Record("pull_request", body);
  r.set_received_at_unix_ms(1'800'000'000'123);
  auto plan = PlanOf(r);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_FALSE(plan->requests.empty());
  for (const auto& req : plan->requests) {
    EXPECT_EQ(req.dispatch().event_at_unix_ms(), 1'795'914'123'000);
    EXPECT_EQ(req.dispatch().received_at_unix_ms(), 1'800'000'000'123);
  }
}

TEST_F(PlannerTest, PullRequestOpenedFansOutToEveryLevelWithABoundToken) {
  auto plan = PlanOf(Record("pull_request", PullRequest("opened")));
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->requests.size(), 4u);
  EXPECT_EQ(plan->requests[0].repo(), "amd/l4");  // highest level first
  EXPECT_EQ(plan->requests[0].level(), 4);
  for (const auto& r : plan->requests) {
    ASSERT_TRUE(r.has_dispatch());
    json::value body = json::parse(r.dispatch().client_payload_json());
    EXPECT_EQ(body.at("event_type").as_string(), "pull_request");
    const auto& cp = body.at("client_payload").as_object();
    EXPECT_EQ(cp.at("delivery_id").as_string(), "d-pull_request");
    EXPECT_EQ(cp.at("payload").at("pull_request").at("head").at("sha").as_string(), "abc123");
    auto claims = keys_.Verify(std::string(cp.at("relay_token").as_string()), 1'700'000'000);
    ASSERT_TRUE(claims.ok()) << claims.status();
    EXPECT_EQ(claims->repo, r.repo());  // a token for this repo only
    EXPECT_EQ(claims->delivery_id, "d-pull_request");
    EXPECT_EQ(r.dispatch().pr_number(), 7);
    EXPECT_EQ(r.dispatch().head_sha(), "abc123");
  }
  // Deterministic ids: planning the same record again gives the same ids.
  auto again = PlanOf(Record("pull_request", PullRequest("opened")));
  EXPECT_EQ(again->requests[2].id(), plan->requests[2].id());
  EXPECT_NE(plan->requests[1].id(), plan->requests[2].id());
  EXPECT_FALSE(plan->labels.has_value());
}

TEST_F(PlannerTest, CrcrLabelsBecomeAFactAndOtherLabelsAreIgnored) {
  auto labeled = PlanOf(Record("pull_request", PullRequest("labeled", R"([{"name":"ciflow/crcr/xpu"},{"name":"bug"}])",
                                                           R"(,"label":{"name":"ciflow/crcr/xpu"})")));
  ASSERT_TRUE(labeled.ok());
  EXPECT_TRUE(labeled->requests.empty());
  ASSERT_TRUE(labeled->labels.has_value());
  EXPECT_EQ(labeled->labels->number(), 7);
  ASSERT_EQ(labeled->labels->crcr_devices_size(), 1);
  EXPECT_EQ(labeled->labels->crcr_devices(0), "xpu");
  auto other = PlanOf(Record("pull_request", PullRequest("labeled", R"([{"name":"bug"}])", R"(,"label":{"name":"bug"})")));
  EXPECT_EQ(other->ignored, "pull_request.labeled");
  // Unlabeled: the fact now holds an empty set.
  auto unlabeled = PlanOf(Record("pull_request", PullRequest("unlabeled", "[]", R"(,"label":{"name":"ciflow/crcr/xpu"})")));
  ASSERT_TRUE(unlabeled->labels.has_value());
  EXPECT_EQ(unlabeled->labels->crcr_devices_size(), 0);
  // A synchronize of a labelled PR dispatches and restates the labels.
  auto sync = PlanOf(Record("pull_request", PullRequest("synchronize", R"([{"name":"ciflow/crcr/xpu"}])")));
  EXPECT_EQ(sync->requests.size(), 4u);
  EXPECT_TRUE(sync->labels.has_value());
}

TEST_F(PlannerTest, ALabelFactCarriesTheEventsOwnTimeNotTheTimeItIsRead) {
  v1::WebhookRecord r = Record("pull_request", PullRequest("labeled", R"([{"name":"ciflow/crcr/xpu"}],"updated_at":"2026-11-23T12:00:00Z")",
                                                           R"(,"label":{"name":"ciflow/crcr/xpu"})"));
  r.set_received_at_unix_ms(1'795'435'200'250);
  auto plan = PlanOf(r);  // read at 1'700'000'000'000
  ASSERT_TRUE(plan.ok() && plan->labels.has_value());
  // GitHub's time of the change, then intake's receipt.
  EXPECT_EQ(plan->labels->event_at_unix_ms(), 1'795'435'200'000);
  EXPECT_EQ(plan->labels->received_at_unix_ms(), 1'795'435'200'250);
  EXPECT_EQ(plan->labels->updated_at_unix_ms(), 1'700'000'000'000);  // when it was published
  // Planned again later (a replay): the same time.
  auto later = PlanWebhook(r, list_, keys_, options_, 1'900'000'000'000);
  EXPECT_EQ(later->labels->event_at_unix_ms(), 1'795'435'200'000);
  // A payload without updated_at: intake's receipt.
  v1::WebhookRecord bare = Record("pull_request", PullRequest("unlabeled", "[]", R"(,"label":{"name":"ciflow/crcr/xpu"})"));
  bare.set_received_at_unix_ms(1'795'000'000'123);
  EXPECT_EQ(PlanOf(bare)->labels->event_at_unix_ms(), 1'795'000'000'123);
}

TEST_F(PlannerTest, PushFansOutAndABranchDeletionDoesNot) {
  auto push = PlanOf(Record("push", R"({"ref":"refs/heads/main","before":"aaa","after":"bbb","repository":{"full_name":"pytorch/pytorch"}})"));
  ASSERT_TRUE(push.ok());
  EXPECT_EQ(push->requests.size(), 4u);
  EXPECT_EQ(push->requests[0].dispatch().head_sha(), "bbb");
  auto deleted = PlanOf(Record("push", R"({"ref":"refs/heads/x","before":"aaa","after":"0000","deleted":true})"));
  EXPECT_TRUE(deleted->requests.empty());
  EXPECT_THAT(deleted->ignored, HasSubstr("deleting"));
}

// Each repository gets what its subscription asks for; what today's
// default would have sent it and it does not ask for is listed as
// filtered, with the reason.
class SubscriptionPlannerTest : public PlannerTest {
 protected:
  SubscriptionPlannerTest() {
    list_ = *allowlist::Allowlist::Parse(std::string(kAllowlist) + R"(
subscriptions:
  acme/l1:
    events: [pull_request.opened, pull_request.synchronize]
    labels: [ciflow/trunk, "ciflow/l1*"]
  acme/l2:
    events: [push]
  intel/l3:
    events: [pull_request, pull_request.labeled]
    labels: [ciflow/xpu]
)", "test");
  }
  static std::vector<std::string> Repos(const Plan& plan) {
    std::vector<std::string> out;
    for (const auto& r : plan.requests) out.push_back(r.repo());
    return out;
  }
  using Filtered = std::vector<std::pair<std::string, std::string>>;
};

TEST_F(SubscriptionPlannerTest, NothingGoesToARepositoryThatDidNotAskForIt) {
  using ::testing::ElementsAre;
  using ::testing::Pair;
  // A synchronize of a PR labelled ciflow/trunk: acme/l1 (its label),
  // amd/l4 (no subscription: today's default); acme/l2 wants pushes only,
  // intel/l3 wants ciflow/xpu PRs.
  auto sync = PlanOf(Record("pull_request", PullRequest("synchronize", R"([{"name":"ciflow/trunk"}])")));
  ASSERT_TRUE(sync.ok()) << sync.status();
  EXPECT_THAT(Repos(*sync), ElementsAre("amd/l4", "acme/l1"));
  EXPECT_THAT(sync->filtered, ElementsAre(Pair("intel/l3", "label"), Pair("acme/l2", "event")));
  EXPECT_TRUE(sync->ignored.empty());
  // A prefix label matches; closed is not among acme/l1's events.
  auto prefixed = PlanOf(Record("pull_request", PullRequest("opened", R"([{"name":"ciflow/l1/riscv"}])")));
  EXPECT_THAT(Repos(*prefixed), ElementsAre("amd/l4", "acme/l1"));
  auto closed = PlanOf(Record("pull_request", PullRequest("closed", R"([{"name":"ciflow/trunk"},{"name":"ciflow/xpu"}])")));
  EXPECT_THAT(Repos(*closed), ElementsAre("amd/l4", "intel/l3"));
  EXPECT_THAT(closed->filtered, ElementsAre(Pair("acme/l2", "event"), Pair("acme/l1", "event")));
  // A push: only the repos that take pushes (acme/l2, and amd/l4 by default).
  auto push = PlanOf(Record("push", R"({"ref":"refs/heads/main","before":"aaa","after":"bbb"})"));
  EXPECT_THAT(Repos(*push), ElementsAre("amd/l4", "acme/l2"));
  EXPECT_THAT(push->filtered, ElementsAre(Pair("intel/l3", "event"), Pair("acme/l1", "event")));
}

TEST_F(SubscriptionPlannerTest, ALabelAddedDispatchesToTheRepositoriesThatAskForIt) {
  using ::testing::ElementsAre;
  // intel/l3 asks for pull_request.labeled with ciflow/xpu: adding it
  // dispatches there, and nowhere else (labeled was never dispatched, so
  // nothing counts as filtered).
  auto xpu = PlanOf(Record("pull_request", PullRequest("labeled", R"([{"name":"ciflow/xpu"}])",
                                                       R"(,"label":{"name":"ciflow/xpu"})")));
  ASSERT_TRUE(xpu.ok()) << xpu.status();
  EXPECT_THAT(Repos(*xpu), ElementsAre("intel/l3"));
  EXPECT_EQ(xpu->requests[0].dispatch().action(), "labeled");
  EXPECT_TRUE(xpu->filtered.empty());
  // Another label added: no dispatch, and the record asks for nothing.
  auto bug = PlanOf(Record("pull_request", PullRequest("labeled", R"([{"name":"ciflow/xpu"},{"name":"bug"}])",
                                                       R"(,"label":{"name":"bug"})")));
  EXPECT_TRUE(bug->requests.empty());
  EXPECT_EQ(bug->ignored, "pull_request.labeled: no repository subscribes");
  // A request id of its own: the labeled delivery is another delivery.
  auto sync = PlanOf(Record("pull_request", PullRequest("synchronize", R"([{"name":"ciflow/xpu"}])")));
  EXPECT_NE(sync->requests.back().id(), xpu->requests[0].id());
}

// github.requests is held to the same: a dispatch to a repository with a
// subscription must be one of its events; one without keeps today's rule.
TEST_F(SubscriptionPlannerTest, ARequestedDispatchIsHeldToTheSubscription) {
  auto dispatch = [](const std::string& repo, const std::string& event, const std::string& action) {
    v1::GitHubRequest r;
    r.set_id("x");
    r.set_repo(repo);
    r.mutable_dispatch()->set_event_type(event);
    r.mutable_dispatch()->set_event(event);
    r.mutable_dispatch()->set_action(action);
    return r;
  };
  EXPECT_TRUE(ValidateRequest(dispatch("acme/l2", "push", ""), list_, options_).ok());
  EXPECT_TRUE(ValidateRequest(dispatch("acme/l1", "pull_request", "opened"), list_, options_).ok());
  absl::Status s = ValidateRequest(dispatch("acme/l1", "pull_request", "closed"), list_, options_);
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_THAT(std::string(s.message()), HasSubstr("acme/l1 does not subscribe to pull_request.closed"));
  EXPECT_FALSE(ValidateRequest(dispatch("acme/l2", "pull_request", "opened"), list_, options_).ok());
  EXPECT_TRUE(ValidateRequest(dispatch("amd/l4", "custom", ""), list_, options_).ok()) << "no subscription: as before";
}

TEST_F(SubscriptionPlannerTest, AnEventNobodyAsksForIsIgnoredWithTheReason) {
  list_ = *allowlist::Allowlist::Parse(R"(
L1: [acme/l1]
subscriptions:
  acme/l1: {events: [push]}
)", "test");
  auto opened = PlanOf(Record("pull_request", PullRequest("opened")));
  ASSERT_TRUE(opened.ok());
  EXPECT_TRUE(opened->requests.empty());
  EXPECT_EQ(opened->ignored, "pull_request.opened: no repository subscribes");
  EXPECT_EQ(opened->filtered.size(), 1u);
}

TEST_F(PlannerTest, RerequestedRelayCheckRunReRunsTheDownstreamRun) {
  std::string body = R"({"action":"rerequested","check_run":{"name":"crcr/intel/l3/ci/build","external_id":"9911/2/build","app":{"id":4242}}})";
  auto plan = PlanOf(Record("check_run", body));
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->requests.size(), 1u);
  EXPECT_EQ(plan->requests[0].repo(), "intel/l3");
  EXPECT_EQ(plan->requests[0].rerun().run_id(), 9911);
  // Another app's check run, a non-relay one, or a repo no longer listed.
  EXPECT_THAT(PlanOf(Record("check_run", R"({"action":"rerequested","check_run":{"name":"crcr/intel/l3/ci/build","external_id":"1/1/b","app":{"id":1}}})"))->ignored,
              HasSubstr("another app"));
  EXPECT_THAT(PlanOf(Record("check_run", R"({"action":"rerequested","check_run":{"name":"lint","external_id":"","app":{"id":4242}}})"))->ignored,
              HasSubstr("not made by the relay"));
  EXPECT_THAT(PlanOf(Record("check_run", R"({"action":"rerequested","check_run":{"name":"crcr/gone/repo/ci/b","external_id":"1/1/b","app":{"id":4242}}})"))->ignored,
              HasSubstr("no longer allowlisted"));
  auto suite = PlanOf(Record("check_suite", R"({"action":"rerequested","check_suite":{"id":555,"app":{"id":4242}}})"));
  ASSERT_EQ(suite->requests.size(), 1u);
  EXPECT_EQ(suite->requests[0].suite_rerun().check_suite_id(), 555);
  EXPECT_EQ(suite->requests[0].repo(), "pytorch/pytorch");
}

TEST_F(PlannerTest, OtherEventsOtherReposAndBrokenPayloads) {
  EXPECT_EQ(PlanOf(Record("issues", R"({"action":"opened"})"))->ignored, "issues");
  EXPECT_EQ(PlanOf(Record("pull_request", PullRequest("opened"), "someone/else"))->ignored, "not the upstream repository");
  EXPECT_EQ(PlanOf(Record("pull_request", PullRequest("edited")))->ignored, "pull_request.edited");
  EXPECT_TRUE(absl::IsInvalidArgument(PlanOf(Record("pull_request", "not json")).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(PlanOf(Record("pull_request", R"({"action":"opened"})")).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(PlanOf(Record("push", R"({"ref":"refs/heads/main"})")).status()));
}

TEST_F(PlannerTest, AnOversizePayloadIsSlimmedUnder64KBAndKeepsWhatCiNeeds) {
  std::string padding = R"(,"big":")" + std::string(90'000, 'x') + "\"";
  auto plan = PlanOf(Record("pull_request", PullRequest("opened", R"([{"name":"ciflow/crcr/xpu"}])", padding)));
  ASSERT_TRUE(plan.ok());
  for (const auto& r : plan->requests) {
    EXPECT_TRUE(r.dispatch().slimmed());
    EXPECT_LT(r.dispatch().client_payload_json().size(), kMaxDispatchBytes);
    json::value body = json::parse(r.dispatch().client_payload_json());
    const auto& cp = body.at("client_payload").as_object();
    EXPECT_TRUE(cp.at("slimmed").as_bool());
    EXPECT_LE(cp.size(), 10u);
    const auto& p = cp.at("payload").as_object();
    EXPECT_FALSE(p.contains("big"));
    EXPECT_EQ(p.at("number").as_int64(), 7);
    EXPECT_EQ(p.at("action").as_string(), "opened");
    EXPECT_EQ(p.at("repository").at("full_name").as_string(), "pytorch/pytorch");
    EXPECT_EQ(p.at("pull_request").at("head").at("sha").as_string(), "abc123");
    EXPECT_EQ(p.at("pull_request").at("base").at("ref").as_string(), "main");
    EXPECT_EQ(p.at("pull_request").at("labels").at(0).at("name").as_string(), "ciflow/crcr/xpu");
  }
  auto small = PlanOf(Record("pull_request", PullRequest("opened")));
  EXPECT_FALSE(small->requests[0].dispatch().slimmed());
}

TEST(CheckRunNamesTest, RoundTrip) {
  EXPECT_EQ(CheckRunName("intel/torch-xpu", "ci", "build"), "crcr/intel/torch-xpu/ci/build");
  auto ref = ParseCheckRun("crcr/intel/torch-xpu/ci/build", "123/1/build");
  ASSERT_TRUE(ref.has_value());
  EXPECT_EQ(ref->downstream_repo, "intel/torch-xpu");
  EXPECT_EQ(ref->run_id, 123);
  EXPECT_FALSE(ParseCheckRun("crcr/x", "1/1/b").has_value());
  EXPECT_FALSE(ParseCheckRun("crcr/a/b/c/d", "x/1/b").has_value());
}

}  // namespace
}  // namespace relay::dispatch

namespace relay::dispatch {
namespace {

// github.requests is a write channel to GitHub for whoever can produce to
// it: only what relay itself asks for is carried out.
TEST(ValidateRequestTest, OnlyTargetsAndValuesRelayAsksForPass) {
  auto list = *allowlist::Allowlist::Parse(kAllowlist, "test");
  PlannerOptions o;
  o.upstream_repo = "pytorch/pytorch";
  auto request = [](const std::string& repo) {
    v1::GitHubRequest r;
    r.set_id("id-1");
    r.set_repo(repo);
    return r;
  };
  auto check_run = [&](const std::string& repo, const std::string& sha) {
    v1::GitHubRequest r = request(repo);
    r.mutable_check_run()->set_name("crcr/intel/l3/ci/build");
    r.mutable_check_run()->set_head_sha(sha);
    return r;
  };
  const std::string sha(40, 'a');
  EXPECT_TRUE(ValidateRequest(check_run("pytorch/pytorch", sha), list, o).ok());
  EXPECT_TRUE(ValidateRequest(check_run("PyTorch/PyTorch", std::string(64, 'b')), list, o).ok());
  v1::GitHubRequest rerun = request("intel/l3");
  rerun.mutable_rerun()->set_run_id(42);
  EXPECT_TRUE(ValidateRequest(rerun, list, o).ok());
  v1::GitHubRequest dispatch = request("acme/l1");
  dispatch.mutable_dispatch()->set_event_type("push");
  EXPECT_TRUE(ValidateRequest(dispatch, list, o).ok());

  auto refused = [&](const v1::GitHubRequest& r, const std::string& why) {
    absl::Status s = ValidateRequest(r, list, o);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << r.ShortDebugString();
    EXPECT_THAT(std::string(s.message()), HasSubstr(why)) << r.ShortDebugString();
  };
  refused(check_run("evil/repo", sha), "upstream repository pytorch/pytorch only");
  refused(check_run("acme/l1", sha), "upstream repository pytorch/pytorch only");
  refused(check_run("pytorch/pytorch", "../../orgs"), "head_sha");
  refused(check_run("pytorch/pytorch", sha + "/x"), "head_sha");
  refused(check_run("pytorch/..", sha), "not an owner/name");
  refused(check_run("pytorch/pytorch/issues", sha), "not an owner/name");
  refused(check_run("py torch/pytorch", sha), "not an owner/name");
  v1::GitHubRequest stranger = request("evil/repo");
  stranger.mutable_dispatch()->set_event_type("push");
  refused(stranger, "allowlisted repositories only");
  v1::GitHubRequest upstream_rerun = request("pytorch/pytorch");
  upstream_rerun.mutable_rerun()->set_run_id(1);
  refused(upstream_rerun, "allowlisted repositories only");
  v1::GitHubRequest no_run = request("intel/l3");
  no_run.mutable_rerun()->set_run_id(0);
  refused(no_run, "run_id");
  v1::GitHubRequest comment = request("intel/l3");
  comment.mutable_comment()->set_issue_number(1);
  refused(comment, "upstream repository");
  refused(request("pytorch/pytorch"), "no call");
}

}  // namespace
}  // namespace relay::dispatch
