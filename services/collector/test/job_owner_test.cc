// The owning side's late-label check runs: the label is followed, not
// consumed in a group, so nothing would bring a check run back whose
// request to github.requests was not acked; the owner keeps it and the
// sweep sends it again.
#include "relay/collector/job_owner.h"

#include <gtest/gtest.h>

#include "relay/base/clock.h"
#include "relay/kafka/testing/fake_consumer.h"
#include "relay/kafka/testing/fake_producer.h"
#include "relay/v1/dispatch.pb.h"

namespace relay::collector {
namespace {

class JobOwnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const std::string& t : {settings_.topics.callbacks, settings_.topics.state, settings_.topics.dispatches,
                                 settings_.topics.decisions,
                                 settings_.topics.results, settings_.topics.github_requests}) {
      broker_.CreateTopic(t, 1);
    }
    owner_ = std::make_unique<JobOwner>(
        JobOwner::Parts{&settings_, &clock_, &producer_, &reader_, &fetch_reader_, [] { return true; },
                        [](const std::string&) { return false; }, [](const v1::CallbackDecision&) {}},
        metrics_);
    ASSERT_TRUE(owner_->Assigned({{settings_.topics.callbacks, 0}}).ok());
  }

  // An L3 job of PR 42 in progress: no check runs yet (no label asks).
  void StartJob() {
    v1::DispatchRecord d;
    d.set_request_id("d1/org/be");
    d.set_delivery_id("d1");
    d.set_upstream_repo("pytorch/pytorch");
    d.set_downstream_repo("org/be");
    d.set_level(3);
    d.set_pr_number(42);
    d.set_head_sha("abc");
    d.set_dispatched_at_unix_ms(clock_.UnixMillis());
    v1::CallbackRequest c;
    c.set_request_id("req1");
    c.set_received_at_unix_ms(clock_.UnixMillis());
    c.set_repo("org/be");
    c.set_token_id("tok1");
    c.set_token_expires_at_unix(clock_.UnixMillis() / 1000 + 3600);
    c.set_body_sha256("body1");
    c.set_level(3);
    c.set_device("xpu");
    c.set_event_type("pull_request");
    c.set_delivery_id("d1");
    c.set_upstream_repo("pytorch/pytorch");
    c.set_pr_number(42);
    c.set_head_sha("abc");
    c.mutable_workflow()->set_status("in_progress");
    c.mutable_workflow()->set_name("CI");
    c.mutable_workflow()->set_run_id("7");
    c.mutable_workflow()->set_run_attempt("1");
    c.mutable_workflow()->set_job_name("test");
    kafka::ConsumedRecord dr{settings_.topics.dispatches, 0, 0, 0, "org/be", d.SerializeAsString(), {}};
    kafka::ConsumedRecord cr{settings_.topics.callbacks, 0, 0, 0, "org/be", c.SerializeAsString(), {}};
    kafka::Batch batch({dr, cr});
    ASSERT_TRUE(owner_->HandleBatch(batch).ok());
  }

  void Label() {
    v1::PullRequestLabels l;
    l.set_upstream_repo("pytorch/pytorch");
    l.set_number(42);
    l.add_crcr_devices("xpu");
    l.set_event_at_unix_ms(clock_.UnixMillis());
    owner_->OnLabels({settings_.topics.labels, 0, 0, 0, "pytorch/pytorch#42", l.SerializeAsString(), {}});
  }

  size_t CheckRunsSent() {
    size_t n = 0;
    for (const auto& r : producer_.sent()) n += r.topic == settings_.topics.github_requests;
    return n;
  }
  double LateCheckRuns(const std::string& result) {
    for (const auto& family : metrics_.Collect()) {
      if (family.name != "relay_collector_late_label_check_runs_total") continue;
      for (const auto& m : family.metric) {
        if (!m.label.empty() && m.label[0].value == result) return m.counter.value;
      }
    }
    return -1;
  }

  CollectorSettings settings_;
  SystemClock clock_;
  prometheus::Registry metrics_;
  kafka::testing::FakeBroker broker_;
  kafka::testing::FakeProducer producer_{kafka::testing::FakeProducer::Mode::kAuto, &broker_};
  kafka::testing::FakeTopicReader reader_{&broker_};
  kafka::testing::FakeTopicReader fetch_reader_{&broker_};
  std::unique_ptr<JobOwner> owner_;
};

TEST_F(JobOwnerTest, ALateLabelsCheckRunNotAckedIsSentAgainByTheSweep) {
  StartJob();
  ASSERT_EQ(CheckRunsSent(), 0u) << "L3 without the label: no check run";
  producer_.set_topic_status(settings_.topics.github_requests, absl::UnavailableError("broker down"));
  Label();
  ASSERT_EQ(CheckRunsSent(), 1u);
  EXPECT_EQ(LateCheckRuns("retrying"), 1);
  owner_->Sweep();  // still down: kept again
  ASSERT_EQ(CheckRunsSent(), 2u);
  EXPECT_EQ(LateCheckRuns("retrying"), 2);
  producer_.set_topic_status(settings_.topics.github_requests, absl::OkStatus());
  owner_->Sweep();
  ASSERT_EQ(CheckRunsSent(), 3u);
  EXPECT_EQ(LateCheckRuns("requested"), 1);
  owner_->Sweep();
  EXPECT_EQ(CheckRunsSent(), 3u) << "acked: not sent again";
  std::vector<std::string> check_runs;
  for (const auto& r : producer_.sent()) {
    if (r.topic == settings_.topics.github_requests) check_runs.push_back(r.value);
  }
  ASSERT_EQ(check_runs.size(), 3u);
  EXPECT_EQ(check_runs[0], check_runs[2]) << "the same request each time (its id deduplicates it downstream)";
}

}  // namespace
}  // namespace relay::collector
