// The redelivery reconciler against the fake GitHub in process (its
// deliveries API), the scheduler and budget, and the in-memory Kafka, on an
// injected clock: a backlog longer than a copy's deadline ends with one POST
// per guid; a listing whose cursor page fails resumes there and covers the
// window it was asked for; what it remembers is bounded by the window; the
// follower of github.webhooks starts at the window, not the topic's start.
// The kill between a `requested` record and its POST is tested on the built
// binary and the real broker (tests/integration/dispatch_it_faults_test.cc).
#include "relay/dispatch/redeliveries.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <future>
#include <set>

#include "fake_github.h"
#include "relay/kafka/testing/fake_consumer.h"
#include "relay/kafka/testing/fake_producer.h"
#include "support/fixtures.h"

namespace relay::dispatch {
namespace {

namespace bhttp = boost::beast::http;
namespace json = boost::json;
using namespace std::chrono_literals;

constexpr char kTopic[] = "github.redeliveries";
constexpr char kWebhooks[] = "github.webhooks";

int64_t RealNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

class ReconcilerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto [priv, pub] = relay::testing::NewRsaKeyPairPem();
    fake_github::Options fo;
    fo.app_id = "77";
    fo.public_key_pem = pub;
    fo.deliver_to = "http://127.0.0.1:9/github/webhook";  // redelivered attempts fail to connect: fine here
    fake_ = std::move(*fake_github::FakeGitHub::Start(fo));
    // The App's JWT is checked against the fake's real clock.
    credentials_ = std::make_unique<github::AppCredentials>("77", *auth::RsaKey::FromPem(priv), &system_clock_);
    broker_.CreateTopic(kTopic, 1);
    broker_.CreateTopic(kWebhooks, 2);
    producer_ = std::make_unique<kafka::testing::FakeProducer>(kafka::testing::FakeProducer::Mode::kAuto, &broker_);
    BudgetOptions bo{100'000, 60s};
    bo.max_writes_per_hour = 100'000;
    budget_ = std::make_unique<Budget>(bo, &clock_);
    SchedulerOptions so;
    so.concurrency = 1;
    so.retry_deadline = 10min;
    scheduler_ = std::make_unique<Scheduler>(
        so,
        [this] {
          return std::make_unique<Executor>(std::move(*http::Client::New(Origin())), credentials_.get(), budget_.get(),
                                            &clock_);
        },
        &clock_, &registry_);
    options_.interval = 10min;
    options_.grace = 0ms;
    options_.request_deadline = so.retry_deadline;
    options_.unsent_margin = 5min;
    options_.retry_after = 30s;
  }
  void TearDown() override {
    if (reconciler_) reconciler_->Stop();
    scheduler_->Stop();
  }

  void StartReconciler() {
    reconciler_ = std::make_unique<Reconciler>(
        options_,
        Reconciler::Parts{[this] { return std::move(*http::Client::New(Origin())); }, credentials_.get(),
                          budget_.get(), scheduler_.get(), producer_.get(),
                          [this](kafka::FollowerOptions o, kafka::FollowCallback cb) {
                            follower_options_ = o;
                            return kafka::testing::NewFakeFollower(&broker_, std::move(o), std::move(cb));
                          },
                          [this]() -> absl::StatusOr<std::unique_ptr<kafka::TopicReader>> {
                            return std::make_unique<kafka::testing::FakeTopicReader>(&broker_);
                          },
                          [this](kafka::ConsumerOptions o) -> absl::StatusOr<std::unique_ptr<kafka::Consumer>> {
                            if (consumer_ends_) return std::make_unique<EndingConsumer>();
                            return kafka::testing::NewFakeConsumer(&broker_, std::move(o), producer_.get());
                          },
                          &clock_,
                          [this](const absl::Status& why) {
                            std::lock_guard lock(fatal_mu_);
                            fatal_.push_back(why);
                          }},
        registry_);
    ASSERT_TRUE(reconciler_->Start().ok());
  }

  std::string Origin() { return "http://127.0.0.1:" + std::to_string(fake_->port()); }
  json::value Control(bhttp::verb m, const std::string& path, const std::string& body = "") {
    auto r = (*http::Client::New(Origin()))->Send(m, path, {{"Content-Type", "application/json"}}, body);
    EXPECT_TRUE(r.ok());
    return json::parse(r->body);
  }
  // A delivery that failed at GitHub: its first attempt's id.
  int64_t DeliverFailed(const std::string& guid) {
    json::value d = Control(bhttp::verb::post, "/_fake/deliver",
                            json::serialize(json::object{{"event", "push"}, {"body", "{}"}, {"guid", guid}, {"mode", "fail"}}));
    return d.at("id").as_int64();
  }
  // POST /app/hook/deliveries/{id}/attempts calls the fake received, by id.
  std::map<int64_t, int> Posts() {
    std::map<int64_t, int> out;
    json::value calls = Control(bhttp::verb::get, "/_fake/calls?brief=1");
    for (const auto& c : calls.as_array()) {
      const auto& o = c.as_object();
      if (o.at("endpoint").as_string() != "POST /app/hook/deliveries/{delivery_id}/attempts") continue;
      std::string path(o.at("path").as_string());
      ++out[std::stoll(path.substr(std::string("/app/hook/deliveries/").size()))];
    }
    return out;
  }
  std::vector<v1::RedeliveryRecord> Log(v1::RedeliveryRecord::KindCase kind) {
    std::vector<v1::RedeliveryRecord> out;
    for (const auto& r : broker_.All(kTopic)) {
      v1::RedeliveryRecord rec;
      if (rec.ParseFromString(r.value) && rec.kind_case() == kind) out.push_back(rec);
    }
    return out;
  }
  // Waits (real time) until `done`; false after `timeout`.
  static bool WaitFor(const std::function<bool()>& done, std::chrono::milliseconds timeout = 20s) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(20ms);
    }
    return true;
  }
  bool WaitForCheckpoints(size_t n) {
    return WaitFor([&] { return Log(v1::RedeliveryRecord::kCheckpoint).size() >= n; });
  }
  int64_t AppendRecord(const v1::RedeliveryRecord& r, const std::string& key) {
    auto appended = broker_.Append(kafka::MessageRecord(kTopic, key, r));
    EXPECT_TRUE(appended.ok());
    return appended.ok() ? appended->second : -1;
  }

  FakeClock clock_;
  SystemClock system_clock_;
  prometheus::Registry registry_;
  std::unique_ptr<fake_github::FakeGitHub> fake_;
  std::unique_ptr<github::AppCredentials> credentials_;
  kafka::testing::FakeBroker broker_{&clock_};
  std::unique_ptr<kafka::testing::FakeProducer> producer_;
  std::unique_ptr<Budget> budget_;
  std::unique_ptr<Scheduler> scheduler_;
  RedeliveryOptions options_;
  kafka::FollowerOptions follower_options_;
  std::unique_ptr<Reconciler> reconciler_;
  // A consumer that stops for good at once, as one whose dead-letter topic
  // refuses records does.
  struct EndingConsumer final : kafka::Consumer {
    absl::Status Run(kafka::RecordHandler) override { return absl::DataLossError("dead-letter topic refuses records"); }
    absl::Status RunBatches(kafka::BatchOptions, kafka::BatchHandler) override { return absl::OkStatus(); }
    void Stop() override {}
    absl::Status Health() const override { return absl::DataLossError("stopped"); }
  };
  bool consumer_ends_ = false;
  std::mutex fatal_mu_;
  std::vector<absl::Status> fatal_;
};

// The consumer of github.redeliveries stops for good: the service hears of
// it (Runtime::Fatal: /healthz fails, the process exits and restarts),
// instead of scanning on with no one reading what it asked for.
TEST_F(ReconcilerTest, AConsumerThatStopsForGoodIsFatalForTheService) {
  consumer_ends_ = true;
  StartReconciler();
  ASSERT_TRUE(WaitFor([&] {
    std::lock_guard lock(fatal_mu_);
    return !fatal_.empty();
  }));
  reconciler_->Stop();
  std::lock_guard lock(fatal_mu_);
  ASSERT_EQ(fatal_.size(), 1u);
  EXPECT_EQ(fatal_[0].code(), absl::StatusCode::kDataLoss);
}

// The one worker is held by a write ahead of every redelivery for 32
// minutes of the injected clock: every copy outlives its deadline queued,
// the scans ask again for guids whose copies never went out, and when the
// backlog drains GitHub gets exactly one POST per guid (before: one per
// copy, three each).
TEST_F(ReconcilerTest, ABacklogLongerThanADeadlineEndsWithExactlyOnePostPerGuid) {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::promise<JobResult> blocker_done;
  v1::GitHubRequest blocker;
  blocker.set_id("blocker");
  blocker.set_repo("acme/busy");
  blocker.set_level(4);
  blocker.mutable_dispatch()->set_client_payload_json("{}");
  scheduler_->Submit(
      blocker, [&](JobResult r) { blocker_done.set_value(std::move(r)); },
      [released] {
        released.wait();
        return false;
      });
  std::set<int64_t> want;
  for (int i = 0; i < 5; ++i) want.insert(DeliverFailed("backlog-" + std::to_string(i)));
  StartReconciler();
  ASSERT_TRUE(WaitForCheckpoints(1));
  ASSERT_EQ(Log(v1::RedeliveryRecord::kRequested).size(), 5u);
  clock_.Advance(16min);  // past deadline + margin: every copy looks dropped
  ASSERT_TRUE(WaitForCheckpoints(2));
  clock_.Advance(16min);
  ASSERT_TRUE(WaitForCheckpoints(3));
  EXPECT_EQ(Log(v1::RedeliveryRecord::kRequested).size(), 15u) << "asked again twice: never sent";
  EXPECT_TRUE(Posts().empty());
  release.set_value();
  ASSERT_EQ(blocker_done.get_future().get().kind, JobResult::Kind::kCancelled);
  ASSERT_TRUE(WaitFor([&] { return Posts().size() == want.size(); })) << Posts().size();
  // Later listings leave them alone: each went out once.
  clock_.Advance(11min);
  ASSERT_TRUE(WaitForCheckpoints(4));
  ASSERT_TRUE(WaitFor([&] { return scheduler_->Queued() == 0; }));
  std::this_thread::sleep_for(300ms);
  std::map<int64_t, int> posts = Posts();
  std::set<int64_t> got;
  for (const auto& [id, n] : posts) {
    got.insert(id);
    EXPECT_EQ(n, 1) << "delivery " << id << " asked for " << n << " times";
  }
  EXPECT_EQ(got, want);
  EXPECT_EQ(Log(v1::RedeliveryRecord::kStarted).size(), 5u);
  auto last = Log(v1::RedeliveryRecord::kCheckpoint).back().checkpoint();
  EXPECT_EQ(last.requested(), 0);
  EXPECT_EQ(last.requested_before(), 5);
}

// An operator asks for a listing back past the last checkpoint; its second
// page answers 502. The listing is kept with its cursor and the ask: the
// retry fetches that page again, and every guid of the window is asked for
// once (before: the retry was a periodic listing back to the checkpoint,
// and 150 due guids were never asked for).
TEST_F(ReconcilerTest, AListingWhoseCursorPageFailsResumesThereAndCoversTheAskedWindow) {
  options_.max_pages = 1;  // a round a page: the cap, and a listing over several rounds
  std::set<int64_t> want;
  for (int i = 0; i < 250; ++i) want.insert(DeliverFailed("window-" + std::to_string(i)));
  // An earlier listing's checkpoint, past every one of them (the fake
  // stamps deliveries with the real clock).
  v1::RedeliveryRecord cp;
  cp.mutable_checkpoint()->set_resume_from_unix_ms(RealNowMs() + 3'600'000);
  cp.mutable_checkpoint()->set_scanned_at_unix_ms(clock_.UnixMillis());
  AppendRecord(cp, "checkpoint");
  StartReconciler();
  ASSERT_TRUE(WaitForCheckpoints(2));  // a periodic listing: nothing new past the checkpoint
  EXPECT_TRUE(Log(v1::RedeliveryRecord::kRequested).empty());

  Control(bhttp::verb::post, "/_fake/faults",
          R"({"method":"GET","path":"/app/hook/deliveries.*cursor=","status":502,"count":1})");
  v1::RedeliveryRecord ask;
  ask.mutable_scan()->set_since_unix_ms(RealNowMs() - 3'600'000);
  int64_t offset = AppendRecord(ask, "scan");
  // Page 1 is decided, page 2 fails: a retry 30 s later, from page 2.
  ASSERT_TRUE(WaitFor([&] { return Log(v1::RedeliveryRecord::kRequested).size() == 100; }));
  ASSERT_TRUE(WaitFor([&] {
    json::value calls = Control(bhttp::verb::get, "/_fake/calls?brief=1");
    for (const auto& c : calls.as_array()) {
      if (c.at("status").as_int64() == 502) return true;
    }
    return false;
  }));
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(Log(v1::RedeliveryRecord::kCheckpoint).size(), 2u) << "no checkpoint before the window is covered";
  EXPECT_EQ(Log(v1::RedeliveryRecord::kRequested).size(), 100u);
  clock_.Advance(31s);
  ASSERT_TRUE(WaitForCheckpoints(3));
  auto done = Log(v1::RedeliveryRecord::kCheckpoint).back().checkpoint();
  EXPECT_GT(done.served_scan_end(), offset);
  EXPECT_LE(done.listed_since_unix_ms(), ask.scan().since_unix_ms());
  EXPECT_EQ(done.requested(), 250);
  EXPECT_EQ(done.pages(), 3);
  EXPECT_EQ(done.resumed(), 1);
  EXPECT_EQ(done.rounds(), 4);
  ASSERT_TRUE(WaitFor([&] { return Posts().size() == want.size(); })) << Posts().size();
  for (const auto& [id, n] : Posts()) {
    EXPECT_TRUE(want.count(id)) << id;
    EXPECT_EQ(n, 1) << id;
  }
}

// 3,000 guids asked for four days ago (past the 72 h window) and 5 an hour
// ago: only the 5 are remembered after the log is read, and none once the
// clock moves past the window. The follower of github.webhooks starts at the
// window (less a day), not at the topic's start.
TEST_F(ReconcilerTest, WhatItRemembersIsBoundedByTheWindow) {
  int64_t now = clock_.UnixMillis();
  auto requested = [&](const std::string& guid, int64_t delivered) {
    v1::RedeliveryRecord r;
    r.mutable_requested()->set_guid(guid);
    r.mutable_requested()->set_delivered_at_unix_ms(delivered);
    r.mutable_requested()->set_at_unix_ms(delivered + 60'000);
    r.mutable_requested()->set_request_id("redelivery/" + guid);
    AppendRecord(r, guid);
    v1::RedeliveryRecord s;
    s.mutable_started()->set_guid(guid);
    s.mutable_started()->set_request_id("redelivery/" + guid);
    AppendRecord(s, guid);
  };
  for (int i = 0; i < 3000; ++i) requested("old-" + std::to_string(i), now - 96 * 3'600'000LL);
  for (int i = 0; i < 5; ++i) requested("new-" + std::to_string(i), now - 3'600'000);
  options_.interval = 0ms;  // only asked-for listings
  StartReconciler();
  ASSERT_TRUE(WaitFor([&] { return reconciler_->Remembered() == 5; })) << reconciler_->Remembered();
  EXPECT_EQ(follower_options_.from_unix_ms, now - options_.window.count() - 24 * 3'600'000LL);
  EXPECT_FALSE(follower_options_.from_beginning);
  clock_.Advance(72h);
  v1::RedeliveryRecord ask;
  ask.mutable_scan()->set_since_unix_ms(0);
  AppendRecord(ask, "scan");
  ASSERT_TRUE(WaitForCheckpoints(1));
  EXPECT_EQ(reconciler_->Remembered(), 0u);
}

}  // namespace
}  // namespace relay::dispatch
