// The scheduler, executor and budget against the fake GitHub in process:
// priorities, retries, rate limits honoured without a breach, permanent
// failures, and check runs and comments found again instead of duplicated.
#include "relay/dispatch/scheduler.h"
#include "relay/kafka/producer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <future>

#include "fake_github.h"
#include "relay/dispatch/planner.h"
#include "support/fixtures.h"
#include "support/timing.h"

namespace relay::dispatch {
namespace {

namespace bhttp = boost::beast::http;
namespace json = boost::json;
using namespace std::chrono_literals;
using ::testing::HasSubstr;


class SchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto [priv, pub] = relay::testing::NewRsaKeyPairPem();
    fake_github::Options fo;
    fo.app_id = "77";
    fo.public_key_pem = pub;
    fake_ = std::move(*fake_github::FakeGitHub::Start(fo));
    credentials_ = std::make_unique<github::AppCredentials>("77", *auth::RsaKey::FromPem(priv), &clock_);
  }
  void StartScheduler(SchedulerOptions options, BudgetOptions budget = {1000, 60s}) {
    budget_ = std::make_unique<Budget>(budget, &clock_);
    scheduler_ = std::make_unique<Scheduler>(
        options,
        [this] {
          return std::make_unique<Executor>(std::move(*http::Client::New(Origin())), credentials_.get(), budget_.get(),
                                            &clock_);
        },
        &clock_, &registry_);
  }
  std::string Origin() { return "http://127.0.0.1:" + std::to_string(fake_->port()); }
  json::value Control(bhttp::verb m, const std::string& path, const std::string& body = "") {
    auto r = (*http::Client::New(Origin()))->Send(m, path, {{"Content-Type", "application/json"}}, body);
    EXPECT_TRUE(r.ok());
    return json::parse(r->body);
  }
  static v1::GitHubRequest Dispatch(const std::string& repo, int level, const std::string& id) {
    v1::GitHubRequest r;
    r.set_id(id);
    r.set_repo(repo);
    r.set_level(level);
    r.mutable_dispatch()->set_client_payload_json(R"({"event_type":"push","client_payload":{"n":")" + id + "\"}}");
    return r;
  }
  // Submits and returns a future of the result.
  std::future<JobResult> Submit(v1::GitHubRequest r) {
    auto p = std::make_shared<std::promise<JobResult>>();
    auto f = p->get_future();
    scheduler_->Submit(std::move(r), [p](JobResult result) { p->set_value(std::move(result)); });
    return f;
  }

  SystemClock clock_;
  prometheus::Registry registry_;
  std::unique_ptr<fake_github::FakeGitHub> fake_;
  std::unique_ptr<github::AppCredentials> credentials_;
  std::unique_ptr<Budget> budget_;
  std::unique_ptr<Scheduler> scheduler_;
};

TEST_F(SchedulerTest, L4WorkQueuedWithL1WorkGoesFirst) {
  Control(bhttp::verb::post, "/_fake/config", R"({"latency_ms":30})");
  SchedulerOptions o;
  o.concurrency = 1;
  StartScheduler(o);
  std::mutex mu;
  std::vector<std::string> order;
  std::vector<std::future<JobResult>> all;
  auto submit = [&](const std::string& repo, int level, const std::string& id) {
    auto p = std::make_shared<std::promise<JobResult>>();
    all.push_back(p->get_future());
    scheduler_->Submit(Dispatch(repo, level, id), [&, p, id](JobResult r) {
      {
        std::lock_guard lock(mu);
        order.push_back(id);
      }
      p->set_value(std::move(r));
    });
  };
  for (int i = 0; i < 6; ++i) submit("acme/low", 1, "l1-" + std::to_string(i));
  for (int i = 0; i < 6; ++i) submit("acme/high", 4, "l4-" + std::to_string(i));
  for (auto& f : all) ASSERT_EQ(f.get().kind, JobResult::Kind::kDone);
  // The one worker may have taken the first L1 before the rest were
  // queued; apart from it, every L4 before any L1.
  ASSERT_EQ(order.size(), 12u);
  int l1_among_first_seven = 0;
  for (int i = 0; i < 7; ++i) l1_among_first_seven += order[i].substr(0, 2) == "l1";
  EXPECT_LE(l1_among_first_seven, 1);
  EXPECT_EQ(order.back().substr(0, 2), "l1");
}

// github.workers above github.max_concurrency: the workers share the
// connections, so GitHub never has more calls at once than there are
// connections, however many workers wait.
TEST_F(SchedulerTest, WorkersShareTheConnectionsAndNoMoreCallsThanConnectionsAreOpen) {
  // Answers slow enough that the two connections' calls overlap even on a
  // loaded machine (at 40 ms one run in a few dozen saw only one in flight).
  Control(bhttp::verb::post, "/_fake/config", R"({"latency_ms":200})");
  budget_ = std::make_unique<Budget>(BudgetOptions{1000, 60s}, &clock_);
  auto pool = std::make_shared<ApiPool>([this] { return std::move(*http::Client::New(Origin())); },
                                        credentials_.get(), 2);
  SchedulerOptions o;
  o.concurrency = 2;
  o.workers = 8;
  scheduler_ = std::make_unique<Scheduler>(
      o, [this, pool] { return std::make_unique<Executor>(pool, budget_.get(), &clock_); }, &clock_, &registry_);
  std::vector<std::future<JobResult>> all;
  for (int i = 0; i < 12; ++i) all.push_back(Submit(Dispatch("acme/r" + std::to_string(i), 2, "w" + std::to_string(i))));
  for (auto& f : all) ASSERT_EQ(f.get().kind, JobResult::Kind::kDone);
  auto stats = Control(bhttp::verb::get, "/_fake/stats");
  EXPECT_EQ(stats.at("dispatches").as_int64(), 12);
  EXPECT_LE(stats.at("max_in_flight").as_int64(), 2);
  EXPECT_EQ(stats.at("max_in_flight").as_int64(), 2) << "both connections were used";
}

// A write whose partition went to another member between its STARTED mark
// and its call (it waited for a connection meanwhile) is not sent: it ends
// cancelled, for the partition's next owner to make.
TEST_F(SchedulerTest, AWriteNoLongerWantedAfterItsMarkIsNotSent) {
  SchedulerOptions o;
  o.concurrency = 1;
  StartScheduler(o);
  auto wanted = std::make_shared<std::atomic<bool>>(true);
  auto p = std::make_shared<std::promise<JobResult>>();
  auto f = p->get_future();
  scheduler_->Submit(
      Dispatch("acme/revoked", 2, "revoked-1"), [p](JobResult r) { p->set_value(std::move(r)); },
      [wanted] { return wanted->load(); },
      [wanted]() -> absl::Status {
        wanted->store(false);  // the revoke lands right after the mark
        return absl::OkStatus();
      });
  JobResult r = f.get();
  EXPECT_EQ(r.kind, JobResult::Kind::kCancelled);
  EXPECT_EQ(Control(bhttp::verb::get, "/_fake/stats").at("dispatches").as_int64(), 0);
}

// A synchronize of PR `pr` at `head` for `repo`.
v1::GitHubRequest PrDispatch(const std::string& repo, const std::string& id, int pr, const std::string& head) {
  v1::GitHubRequest r;
  r.set_id(id);
  r.set_repo(repo);
  r.set_level(2);
  auto* d = r.mutable_dispatch();
  d->set_client_payload_json(R"({"event_type":"pull_request","client_payload":{"n":")" + id + "\"}}");
  d->set_upstream_repo("pytorch/pytorch");
  d->set_event("pull_request");
  d->set_action("synchronize");
  d->set_pr_number(pr);
  d->set_head_sha(head);
  return r;
}

TEST(SupersedeKeyTest, OnePullRequestsHeadDispatchesToOneRepository) {
  EXPECT_EQ(SupersedeKey(PrDispatch("Acme/L1", "a", 7, "a1")), "pytorch/pytorch#7>acme/l1");
  auto closed = PrDispatch("acme/l1", "c", 7, "a1");
  closed.mutable_dispatch()->set_action("closed");
  EXPECT_EQ(SupersedeKey(closed), "") << "a close builds nothing new: never coalesced";
  auto push = PrDispatch("acme/l1", "p", 0, "a1");
  push.mutable_dispatch()->set_event("push");
  EXPECT_EQ(SupersedeKey(push), "");
  v1::GitHubRequest rerun;
  rerun.mutable_rerun()->set_run_id(1);
  EXPECT_EQ(SupersedeKey(rerun), "");
}

class CoalescingTest : public SchedulerTest {
 protected:
  // Submits with the request's coalesce key; `started` (if given) is set
  // when its first write begins.
  std::future<JobResult> SubmitKeyed(v1::GitHubRequest r, std::promise<void>* started = nullptr) {
    auto p = std::make_shared<std::promise<JobResult>>();
    auto f = p->get_future();
    std::string key = SupersedeKey(r);
    Executor::BeforeWrite before;
    if (started) before = [started] { started->set_value(); return absl::OkStatus(); };
    scheduler_->Submit(std::move(r), [p](JobResult result) { p->set_value(std::move(result)); }, {}, std::move(before),
                       std::move(key));
    return f;
  }
  // GitHub held back (every answer 300 ms late) and the one worker busy
  // with a write to another repo, so what is submitted next waits in line.
  void HoldTheOneWorker(std::future<JobResult>* blocker) {
    Control(bhttp::verb::post, "/_fake/config", R"({"latency_ms":300})");
    SchedulerOptions o;
    o.concurrency = 1;
    StartScheduler(o);
    std::promise<void> blocking;
    *blocker = SubmitKeyed(PrDispatch("acme/other", "blocker", 9, "z"), &blocking);
    ASSERT_EQ(blocking.get_future().wait_for(10s), std::future_status::ready) << "the one worker never wrote";
  }
  double Superseded() {
    for (const auto& family : registry_.Collect()) {
      if (family.name == "relay_dispatch_writes_superseded_total") return family.metric.at(0).counter.value;
    }
    return -1;
  }
};

// GitHub held back (one worker, every answer 300 ms late), so writes queue:
// a newer head of the same PR for the same repository supersedes the
// queued one, which is never sent; the newest goes out, and so do the
// other repository's and a second delivery of the same head.
TEST_F(CoalescingTest, ANewerHeadSupersedesTheQueuedDispatchAndTheNewestGoesOut) {
  std::future<JobResult> blocker;
  ASSERT_NO_FATAL_FAILURE(HoldTheOneWorker(&blocker));
  auto a = SubmitKeyed(PrDispatch("acme/l1", "a", 7, "a1"));
  auto other_repo = SubmitKeyed(PrDispatch("acme/l2", "a-l2", 7, "a1"));
  auto b = SubmitKeyed(PrDispatch("acme/l1", "b", 7, "b2"));
  auto b_again = SubmitKeyed(PrDispatch("acme/l1", "b-again", 7, "b2"));  // a redelivery: the same head
  JobResult ra = a.get();
  EXPECT_EQ(ra.kind, JobResult::Kind::kSuperseded);
  EXPECT_EQ(ra.superseded_by, "b");
  EXPECT_EQ(ra.attempts, 0) << "superseded in line: never attempted";
  for (auto* f : {&blocker, &other_repo, &b, &b_again}) {
    JobResult r = f->get();
    EXPECT_EQ(r.kind, JobResult::Kind::kDone) << r.error;
  }
  auto stats = Control(bhttp::verb::get, "/_fake/stats");
  EXPECT_EQ(stats.at("dispatches").as_int64(), 4) << "a1 to acme/l1 was sent";
  EXPECT_EQ(Superseded(), 1);
}

// GitHub delivers out of order (or the older event is redelivered): the
// older head arrives while the newer waits in line. By the events' own
// times the older is the one superseded, and the newer goes out; a request
// without event times (from before the field) keeps the order of arrival.
TEST_F(CoalescingTest, AnOlderHeadArrivingSecondIsTheOneSuperseded) {
  std::future<JobResult> blocker;
  ASSERT_NO_FATAL_FAILURE(HoldTheOneWorker(&blocker));
  auto at = [](v1::GitHubRequest r, int64_t event_s, int64_t received_ms) {
    r.mutable_dispatch()->set_event_at_unix_ms(event_s * 1000);
    r.mutable_dispatch()->set_received_at_unix_ms(received_ms);
    return r;
  };
  auto newer = SubmitKeyed(at(PrDispatch("acme/l1", "new", 7, "b2"), 2000, 2'000'500));
  auto older = SubmitKeyed(at(PrDispatch("acme/l1", "old", 7, "a1"), 1000, 2'000'900));  // received later
  // Without times (another PR): arrival order, as before.
  auto first = SubmitKeyed(PrDispatch("acme/l1", "first", 8, "c1"));
  auto second = SubmitKeyed(at(PrDispatch("acme/l1", "second", 8, "d1"), 1000, 1'000'000));
  JobResult ro = older.get();
  EXPECT_EQ(ro.kind, JobResult::Kind::kSuperseded);
  EXPECT_EQ(ro.superseded_by, "new");
  EXPECT_EQ(ro.attempts, 0);
  JobResult rn = newer.get();
  EXPECT_EQ(rn.kind, JobResult::Kind::kDone) << rn.error;
  EXPECT_EQ(first.get().kind, JobResult::Kind::kSuperseded);
  EXPECT_EQ(second.get().kind, JobResult::Kind::kDone);
  EXPECT_EQ(blocker.get().kind, JobResult::Kind::kDone);
  auto stats = Control(bhttp::verb::get, "/_fake/stats");
  EXPECT_EQ(stats.at("dispatches").as_int64(), 3) << "blocker, new, second";
  EXPECT_EQ(Superseded(), 2);
}

// A dispatch already writing goes out whatever comes after it; one a
// worker holds while it waits for the budget (not yet writing) is
// superseded there, and its grant is never used for a write.
TEST_F(CoalescingTest, AStartedDispatchGoesOutAndOneWaitingForTheBudgetIsSuperseded) {
  Control(bhttp::verb::post, "/_fake/config", R"({"latency_ms":300})");
  SchedulerOptions o;
  o.concurrency = 2;
  StartScheduler(o, BudgetOptions{1, 1000ms});  // one write a second
  std::promise<void> writing;
  auto x = SubmitKeyed(PrDispatch("acme/l1", "x", 8, "x1"), &writing);
  ASSERT_EQ(writing.get_future().wait_for(10s), std::future_status::ready);
  auto y = SubmitKeyed(PrDispatch("acme/l1", "y", 8, "y2"));  // x is on its way: not superseded
  // The second worker holds y, waiting for the window (a second away):
  // taken off the queue, then a moment to ask for its grant.
  ASSERT_TRUE(relay::testing::WaitFor([&] { return scheduler_->Queued() == 0; }, 700ms)) << "y was never taken";
  std::this_thread::sleep_for(50ms);
  auto z = SubmitKeyed(PrDispatch("acme/l1", "z", 8, "z3"));
  JobResult rx = x.get(), ry = y.get(), rz = z.get();
  EXPECT_EQ(rx.kind, JobResult::Kind::kDone) << rx.error;
  EXPECT_EQ(ry.kind, JobResult::Kind::kSuperseded) << ry.error;
  EXPECT_EQ(ry.superseded_by, "z");
  EXPECT_EQ(ry.attempts, 1) << "superseded in a worker's hands, before its write";
  EXPECT_EQ(rz.kind, JobResult::Kind::kDone) << rz.error;
  auto stats = Control(bhttp::verb::get, "/_fake/stats");
  EXPECT_EQ(stats.at("dispatches").as_int64(), 2);
  EXPECT_EQ(Superseded(), 1);
}

TEST_F(SchedulerTest, TransientFailuresRetryAndPermanentOnesEndAtOnce) {
  SchedulerOptions o;
  o.backoff_min = 20ms;
  o.backoff_max = 100ms;
  StartScheduler(o);
  Control(bhttp::verb::post, "/_fake/faults", R"({"path":"/repos/acme/flaky/dispatches","status":502,"count":2})");
  Control(bhttp::verb::post, "/_fake/faults", R"({"path":"/repos/acme/gone/dispatches","status":404,"count":-1})");
  Control(bhttp::verb::post, "/_fake/faults", R"({"path":"/repos/acme/bad/dispatches","status":422,"count":-1,"message":"event_type invalid"})");
  auto flaky = Submit(Dispatch("acme/flaky", 2, "f"));
  auto gone = Submit(Dispatch("acme/gone", 2, "g"));
  auto bad = Submit(Dispatch("acme/bad", 2, "b"));
  JobResult f = flaky.get();
  EXPECT_EQ(f.kind, JobResult::Kind::kDone);
  EXPECT_EQ(f.attempts, 3);
  JobResult g = gone.get();
  EXPECT_EQ(g.kind, JobResult::Kind::kFailed);
  EXPECT_EQ(g.attempts, 1);
  EXPECT_EQ(g.http_status, 404u);
  JobResult b = bad.get();
  EXPECT_EQ(b.kind, JobResult::Kind::kFailed);
  EXPECT_THAT(b.error, HasSubstr("event_type invalid"));
  EXPECT_EQ(b.endpoint, "POST /repos/{owner}/{repo}/dispatches");
  // A repo the app is not installed on is permanent too.
  Control(bhttp::verb::post, "/_fake/config", R"({"not_installed":["ghost/repo"]})");
  JobResult ghost = Submit(Dispatch("ghost/repo", 1, "x")).get();
  EXPECT_EQ(ghost.kind, JobResult::Kind::kFailed);
  EXPECT_THAT(ghost.error, HasSubstr("app not installed"));
  EXPECT_TRUE(ghost.not_installed);
  EXPECT_FALSE(g.not_installed) << "a 404 from an installed repo is not 'not installed'";
}

// A write whose STARTED mark keeps failing never reached GitHub: at its
// deadline it is cancelled (its batch comes again), not failed and
// dead-lettered; a mark refused because the partition has another owner
// (fenced) is cancelled at once.
TEST_F(SchedulerTest, AWriteWhoseMarkFailsIsCancelledNotDeadLettered) {
  SchedulerOptions o;
  o.backoff_min = 20ms;
  o.backoff_max = 50ms;
  o.retry_deadline = 300ms;
  StartScheduler(o);
  auto submit = [&](const std::string& id, absl::Status mark) {
    auto p = std::make_shared<std::promise<JobResult>>();
    auto f = p->get_future();
    scheduler_->Submit(Dispatch("acme/one", 2, id), [p](JobResult r) { p->set_value(std::move(r)); }, {},
                       [mark] { return mark; });
    return f;
  };
  auto down = submit("down", absl::UnavailableError("transaction coordinator moved"));
  auto fenced = submit("fenced", kafka::FencedError("a newer member owns the partition"));
  JobResult d = down.get();
  EXPECT_EQ(d.kind, JobResult::Kind::kCancelled) << d.error;
  EXPECT_GE(d.attempts, 2) << "retried until the deadline";
  JobResult f = fenced.get();
  EXPECT_EQ(f.kind, JobResult::Kind::kCancelled) << f.error;
  EXPECT_EQ(f.attempts, 1) << "fenced: at once";
  auto stats = Control(bhttp::verb::get, "/_fake/stats");
  EXPECT_EQ(stats.at("dispatches").as_int64(), 0) << "nothing reached GitHub";
}

// The App reinstalled between two writes: the second is refused once
// (401), the installation is found again and the write done on a retry
// under the budget, never dead-lettered.
TEST_F(SchedulerTest, AWriteAfterTheAppWasReinstalledIsDoneOnARetry) {
  StartScheduler(SchedulerOptions{});
  ASSERT_EQ(Submit(Dispatch("acme/one", 2, "a")).get().kind, JobResult::Kind::kDone);
  Control(bhttp::verb::post, "/_fake/config", R"({"reinstall":true})");
  JobResult r = Submit(Dispatch("acme/one", 2, "b")).get();
  EXPECT_EQ(r.kind, JobResult::Kind::kDone) << r.error;
  EXPECT_EQ(r.attempts, 2);
}

TEST_F(SchedulerTest, TransientFailuresStopAtTheRetryDeadline) {
  SchedulerOptions o;
  o.backoff_min = 20ms;
  o.backoff_max = 50ms;
  // Room for three attempts on a sanitizer build too (the first fetches
  // an installation token).
  o.retry_deadline = std::chrono::duration_cast<std::chrono::milliseconds>(300ms * relay::testing::TimeScale());
  StartScheduler(o);
  Control(bhttp::verb::post, "/_fake/faults", R"({"path":"dispatches","status":503,"count":-1})");
  JobResult r = Submit(Dispatch("acme/down", 1, "d")).get();
  EXPECT_EQ(r.kind, JobResult::Kind::kFailed);
  EXPECT_THAT(r.error, HasSubstr("gave up after"));
  EXPECT_GE(r.attempts, 3);
}

// The deadline counts from the Submit: a write queued behind another for
// longer than its deadline is not retried after its first failure (before:
// it counted from the first attempt, so a write could wait without bound).
TEST_F(SchedulerTest, TheRetryDeadlineCountsFromTheSubmitNotTheFirstAttempt) {
  SchedulerOptions o;
  o.concurrency = 1;
  o.backoff_min = 20ms;
  o.backoff_max = 50ms;
  o.retry_deadline = 300ms;
  StartScheduler(o);
  Control(bhttp::verb::post, "/_fake/faults", R"({"path":"/repos/acme/down/dispatches","status":503,"count":-1})");
  // The one worker is held 600 ms by a write ahead of it.
  std::promise<void> blocker_done;
  scheduler_->Submit(
      Dispatch("acme/busy", 4, "blocker"), [&](JobResult) { blocker_done.set_value(); },
      [] {
        std::this_thread::sleep_for(600ms);
        return false;
      });
  std::this_thread::sleep_for(100ms);
  JobResult r = Submit(Dispatch("acme/down", 1, "d")).get();
  blocker_done.get_future().wait();
  EXPECT_EQ(r.kind, JobResult::Kind::kFailed);
  EXPECT_EQ(r.attempts, 1) << r.error;
  EXPECT_THAT(r.error, HasSubstr("gave up after 1 attempts"));
}

// A redelivery whose POST may have reached GitHub (a 502) is not made
// again: each POST would be a delivery of its own.
TEST_F(SchedulerTest, ARedeliveryIsNotRepeatedAfterAFailureThatMayHaveReachedGitHub) {
  SchedulerOptions o;
  o.backoff_min = 20ms;
  o.backoff_max = 50ms;
  StartScheduler(o);
  Control(bhttp::verb::post, "/_fake/faults", R"({"path":"/app/hook/deliveries/.*/attempts","status":502,"count":1})");
  v1::GitHubRequest rd;
  rd.set_id("redelivery/g/1");
  rd.mutable_redelivery()->set_delivery_id(1);
  rd.mutable_redelivery()->set_guid("g");
  JobResult r = Submit(rd).get();
  EXPECT_EQ(r.kind, JobResult::Kind::kFailed);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_THAT(r.error, HasSubstr("not repeated"));
  int posts = 0;
  json::value calls = Control(bhttp::verb::get, "/_fake/calls");
  for (const auto& c : calls.as_array()) {
    posts += c.at("endpoint").as_string() == "POST /app/hook/deliveries/{delivery_id}/attempts";
  }
  EXPECT_EQ(posts, 1);
}

TEST_F(SchedulerTest, RetryAfterIsHonouredAndTheCeilingIsNeverBreached) {
  // A ceiling of 5 writes per 500 ms on both sides; 10x that offered at once.
  Control(bhttp::verb::post, "/_fake/config", R"({"content_limit":{"per_window":5,"window_seconds":1}})");
  SchedulerOptions o;
  o.concurrency = 4;
  StartScheduler(o, BudgetOptions{5, 1000ms});
  auto start = std::chrono::steady_clock::now();
  std::vector<std::future<JobResult>> all;
  for (int i = 0; i < 50; ++i) all.push_back(Submit(Dispatch("acme/busy", 2, std::to_string(i))));
  for (auto& f : all) EXPECT_EQ(f.get().kind, JobResult::Kind::kDone);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 9s) << "50 writes at 5 a second";
  auto stats = Control(bhttp::verb::get, "/_fake/stats");
  EXPECT_EQ(stats.at("breaches").at("secondary").as_int64(), 0);
  EXPECT_EQ(stats.at("dispatches").as_int64(), 50);
  // A 429 with Retry-After: 1 makes the next attempt wait a second.
  Control(bhttp::verb::post, "/_fake/faults", R"({"path":"dispatches","status":429,"count":1,"retry_after":1})");
  auto t0 = std::chrono::steady_clock::now();
  JobResult r = Submit(Dispatch("acme/busy", 2, "after-429")).get();
  EXPECT_EQ(r.kind, JobResult::Kind::kDone);
  EXPECT_EQ(r.attempts, 2);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 950ms);
}

TEST_F(SchedulerTest, A403SecondaryLimitWithoutRetryAfterPausesEveryone) {
  // GitHub often answers a secondary limit with a bare 403 and a message.
  Control(bhttp::verb::post, "/_fake/faults",
          R"({"path":"dispatches","status":403,"count":1,)"
          R"("message":"You have exceeded a secondary rate limit. Please wait a few minutes before you try again."})");
  SchedulerOptions o;
  o.concurrency = 2;
  BudgetOptions b{1000, 60s};
  b.secondary_pause = 1500ms;  // a minute in production
  StartScheduler(o, b);
  auto t0 = std::chrono::steady_clock::now();
  JobResult r = Submit(Dispatch("acme/busy", 2, "after-403")).get();
  EXPECT_EQ(r.kind, JobResult::Kind::kDone) << r.error;
  EXPECT_EQ(r.attempts, 2);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 1400ms) << "retried before the pause ended";
  // A 403 that is neither limit is a permanent refusal, not retried.
  Control(bhttp::verb::post, "/_fake/faults",
          R"({"path":"dispatches","status":403,"count":1,"message":"Resource not accessible by integration"})");
  r = Submit(Dispatch("acme/busy", 2, "forbidden")).get();
  EXPECT_EQ(r.kind, JobResult::Kind::kFailed);
  EXPECT_EQ(r.attempts, 1);
}

TEST(IsSecondaryLimitTest, ReadsStatusHeaderAndMessage) {
  auto answer = [](unsigned status, std::map<std::string, std::string> headers, std::string body) {
    return github::ApiResult{status, std::move(headers), std::move(body), 0};
  };
  EXPECT_TRUE(IsSecondaryLimit(answer(429, {}, "")));
  EXPECT_TRUE(IsSecondaryLimit(answer(403, {{"retry-after", "30"}}, "")));
  EXPECT_TRUE(IsSecondaryLimit(answer(403, {}, R"({"message":"You have exceeded a Secondary Rate Limit."})")));
  EXPECT_TRUE(IsSecondaryLimit(answer(403, {}, R"({"message":"You have triggered an abuse detection mechanism."})")));
  EXPECT_FALSE(IsSecondaryLimit(answer(403, {}, R"({"message":"Resource not accessible by integration"})")));
  EXPECT_FALSE(IsSecondaryLimit(answer(403, {{"x-ratelimit-remaining", "0"}}, "")))
      << "a primary limit: its reset, not a pause for everyone";
  EXPECT_FALSE(IsSecondaryLimit(answer(500, {{"retry-after", "1"}}, "")));
}

TEST_F(SchedulerTest, ThePrimaryLimitIsNeverExceeded) {
  // 12 calls an installation per 3 s window (the token fetch counts too).
  Control(bhttp::verb::post, "/_fake/config", R"({"rate_limit":{"limit":12,"window_seconds":3}})");
  SchedulerOptions o;
  o.concurrency = 4;
  StartScheduler(o);
  std::vector<std::future<JobResult>> all;
  for (int i = 0; i < 30; ++i) all.push_back(Submit(Dispatch("acme/primary", 3, std::to_string(i))));
  for (auto& f : all) EXPECT_EQ(f.get().kind, JobResult::Kind::kDone);
  auto stats = Control(bhttp::verb::get, "/_fake/stats");
  EXPECT_EQ(stats.at("breaches").at("primary").as_int64(), 0);
  EXPECT_EQ(stats.at("dispatches").as_int64(), 30);
}

TEST_F(SchedulerTest, CheckRunsAndCommentsAreFoundAgainNotDuplicated) {
  StartScheduler(SchedulerOptions{});
  auto check = [](const std::string& status, const std::string& conclusion, const std::string& attempt = "1") {
    v1::GitHubRequest r;
    r.set_id("cr-" + status + "-" + attempt);
    r.set_repo("pytorch/pytorch");
    r.set_level(3);
    auto* c = r.mutable_check_run();
    c->set_name(CheckRunName("intel/l3", "ci", "build"));
    c->set_head_sha("abc123");
    c->set_external_id("555/" + attempt + "/build");
    c->set_status(status);
    c->set_conclusion(conclusion);
    c->set_details_url("https://github.com/intel/l3/actions/runs/555");
    return r;
  };
  ASSERT_EQ(Submit(check("in_progress", "")).get().kind, JobResult::Kind::kDone);
  JobResult done = Submit(check("completed", "success")).get();
  ASSERT_EQ(done.kind, JobResult::Kind::kDone);
  EXPECT_EQ(done.endpoint, "PATCH /repos/{owner}/{repo}/check-runs/{id}");
  auto calls = Control(bhttp::verb::get, "/_fake/calls").as_array();
  int creates = 0, updates = 0;
  for (const auto& c : calls) {
    std::string e(c.at("endpoint").as_string());
    creates += e == "POST /repos/{owner}/{repo}/check-runs";
    updates += e == "PATCH /repos/{owner}/{repo}/check-runs/{id}";
  }
  EXPECT_EQ(creates, 1);
  EXPECT_EQ(updates, 1);
  // A re-run attempt is a check run of its own with the same name; the
  // first attempt's is still found (GitHub lists only the newest of a name
  // unless asked for all).
  ASSERT_EQ(Submit(check("in_progress", "", "2")).get().kind, JobResult::Kind::kDone);
  auto again = check("completed", "failure");
  again.set_id("cr-again");
  JobResult first = Submit(again).get();
  ASSERT_EQ(first.kind, JobResult::Kind::kDone);
  EXPECT_EQ(first.endpoint, "PATCH /repos/{owner}/{repo}/check-runs/{id}");
  creates = 0;
  calls = Control(bhttp::verb::get, "/_fake/calls").as_array();
  for (const auto& c : calls) {
    creates += c.at("endpoint").as_string() == "POST /repos/{owner}/{repo}/check-runs";
  }
  EXPECT_EQ(creates, 2);

  auto comment = [](const std::string& body) {
    v1::GitHubRequest r;
    r.set_id("c-" + body);
    r.set_repo("pytorch/pytorch");
    r.mutable_comment()->set_issue_number(7);
    r.mutable_comment()->set_marker("<!-- relay:summary -->");
    r.mutable_comment()->set_body("<!-- relay:summary -->\n" + body);
    return r;
  };
  ASSERT_EQ(Submit(comment("first")).get().kind, JobResult::Kind::kDone);
  ASSERT_EQ(Submit(comment("second")).get().kind, JobResult::Kind::kDone);
  calls = Control(bhttp::verb::get, "/_fake/calls").as_array();
  int comment_posts = 0, comment_patches = 0;
  for (const auto& c : calls) {
    std::string e(c.at("endpoint").as_string());
    comment_posts += e == "POST /repos/{owner}/{repo}/issues/{id}/comments";
    comment_patches += e == "PATCH /repos/{owner}/{repo}/issues/comments/{id}";
  }
  EXPECT_EQ(comment_posts, 1);
  EXPECT_EQ(comment_patches, 1);
  // Without its marker in the body a comment is refused (it could never be found again).
  auto bad = comment("x");
  bad.mutable_comment()->set_body("no marker");
  EXPECT_EQ(Submit(bad).get().kind, JobResult::Kind::kFailed);
}

TEST_F(SchedulerTest, AReRunOfARunningWorkflowIsANoOp) {
  Control(bhttp::verb::post, "/_fake/config", R"({"running_runs":[42]})");
  StartScheduler(SchedulerOptions{});
  v1::GitHubRequest r;
  r.set_id("rr");
  r.set_repo("intel/l3");
  r.mutable_rerun()->set_run_id(42);
  EXPECT_EQ(Submit(r).get().kind, JobResult::Kind::kNoOp);
  r.mutable_rerun()->set_run_id(43);
  EXPECT_EQ(Submit(r).get().kind, JobResult::Kind::kDone);
}

}  // namespace
}  // namespace relay::dispatch
