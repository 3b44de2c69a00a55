// Every GitHub write of the suite goes through here: a priority queue (L4
// before L3 before L2 before L1; within a level check runs, then re-runs,
// then dispatches, then comments; then first come), a fixed number of
// workers (github.workers; their calls share github.max_concurrency
// connections: Executor's ApiPool), the budget, and retries: transient
// failures back off exponentially with jitter until github.retry_deadline,
// counted from the job's Submit (time spent queued behind other writes
// counts), rate limits wait as the budget says, permanent failures end at
// once. A redelivery is never attempted again after a failure that may have
// reached GitHub (each POST is a delivery of its own).
//
// Coalescing: a job submitted with a coalesce key (SupersedeKey: one pull
// request's head dispatches to one repository) supersedes the older job of
// the same key when their head shas differ and the older has not started
// writing (its BeforeWrite not reached): the older ends kSuperseded, never
// sent; one that started goes out. The newest is never superseded but by a
// newer one. Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <queue>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "relay/base/clock.h"
#include "relay/dispatch/executor.h"

namespace relay::dispatch {

struct JobResult {
  // kFailed: permanent, or gave up at the deadline; kCancelled: no longer
  // wanted (its input partition went to another member), not attempted again.
  // kSuperseded: a newer head of the same pull request was submitted for
  // the same repository before this one started; never sent.
  enum class Kind { kDone, kNoOp, kFailed, kCancelled, kSuperseded };
  Kind kind = Kind::kFailed;
  unsigned http_status = 0;
  int attempts = 0;
  // A transient failure after the request may have reached GitHub (a
  // timeout or reset after sending, a 502/504) was retried: GitHub may have
  // taken it twice.
  bool uncertain_retry = false;
  std::string error;
  std::string endpoint;
  int64_t installation_id = 0;
  std::chrono::milliseconds latency{0};  // first attempt to the result
  bool not_installed = false;            // kFailed because the App is not installed on the repository
  std::string superseded_by;             // kSuperseded: the newer request's id
};

// The coalesce key of a request: for a pull_request dispatch that carries
// a head to build (opened, reopened, synchronize), its upstream repository,
// PR number and downstream repository (lower case); empty for every other
// request (never coalesced).
std::string SupersedeKey(const v1::GitHubRequest& request);

struct SchedulerOptions {
  int concurrency = 8;  // GitHub calls at once (the executors' ApiPool)
  int workers = 0;      // threads taking jobs; 0 (or fewer): concurrency
  std::chrono::milliseconds retry_deadline{10 * 60 * 1000};
  std::chrono::milliseconds backoff_min{1000};
  std::chrono::milliseconds backoff_max{60'000};
};

class Scheduler {
 public:
  using Done = absl::AnyInvocable<void(JobResult) &&>;
  using ExecutorFactory = std::function<std::unique_ptr<Executor>()>;

  Scheduler(SchedulerOptions options, ExecutorFactory executors, const Clock* clock, prometheus::Registry* metrics);
  ~Scheduler();

  // `done` runs once, on a worker thread (a job superseded while queued:
  // on the scheduler's own thread), with the final result.
  // `wanted`, when given, is asked before every attempt; false cancels.
  // `before_write` runs just before the job's first write (Executor).
  // `coalesce_key` (non-empty): supersedes the older unstarted job of the
  // same key with another head (above).
  void Submit(v1::GitHubRequest request, Done done, std::function<bool()> wanted = {},
              Executor::BeforeWrite before_write = {}, std::string coalesce_key = {});
  // Stops taking jobs; waits for calls in progress (their results still
  // come); jobs still queued are dropped without a result (the input that
  // asked for them was not committed, so it asks again after a restart).
  void Stop();
  size_t Queued() const;

 private:
  struct Job {
    v1::GitHubRequest request;
    Done done;
    std::function<bool()> wanted;
    Executor::BeforeWrite before_write;
    int attempts = 0;
    bool maybe_sent = false;  // an earlier attempt may have reached GitHub
    int credential_retries = 0;  // kRetry verdicts taken at once
    std::chrono::steady_clock::time_point enqueued{};  // Submit: the retry deadline counts from here
    std::chrono::steady_clock::time_point first_attempt{};
    std::chrono::milliseconds backoff{0};
    // Coalescing, under mu_: the key; the first write began (never
    // superseded then); superseded; held by a worker (else queued or in a
    // backoff); its result given (a superseded queued job still in line).
    std::string coalesce_key;
    bool started = false, superseded = false, in_worker = false, finished = false;
    std::string superseded_by;
  };
  struct Ready {
    int level;
    int kind_rank;
    uint64_t seq;
    std::shared_ptr<Job> job;
    bool operator<(const Ready& o) const {  // priority_queue: top is the greatest
      if (level != o.level) return level < o.level;
      if (kind_rank != o.kind_rank) return kind_rank > o.kind_rank;
      return seq > o.seq;
    }
  };
  void Work();
  void Enqueue(std::shared_ptr<Job> job);
  // a's head is older than b's by their events' own times (both known,
  // different shas).
  static bool IsOlderHead(const Job& a, const Job& b);
  void Finish(std::shared_ptr<Job> job, const Verdict& v, JobResult::Kind kind);
  // Under mu_: `job` supersedes the newest older job of its key if it may;
  // a superseded job not held by a worker is handed to the finisher.
  void SupersedeLocked(const std::shared_ptr<Job>& job);
  // Under mu_: `job` is superseded by request `by` (never sent).
  void MarkSupersededLocked(const std::shared_ptr<Job>& job, const std::string& by);
  void FinishSuperseded();  // the finisher thread

  SchedulerOptions options_;
  ExecutorFactory executors_;
  const Clock* clock_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::priority_queue<Ready> ready_;
  std::multimap<std::chrono::steady_clock::time_point, std::shared_ptr<Job>> delayed_;  // backoffs
  uint64_t seq_ = 0;
  // Jobs taken from the queue that have not reached their first grant yet
  // (under mu_): at most `concurrency`, so with more workers than that the
  // queue's order (L4 first) is still the order the budget is asked in,
  // and the extra workers only wait for marks and connections.
  int admitted_ = 0;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> workers_;
  std::map<std::string, std::shared_ptr<Job>> newest_;  // by coalesce key, until it finishes
  std::deque<std::shared_ptr<Job>> to_finish_;           // superseded while queued
  std::condition_variable finish_cv_;
  std::thread finisher_;
  std::mt19937_64 rng_{std::random_device{}()};
  prometheus::Family<prometheus::Counter>& calls_;
  prometheus::Family<prometheus::Gauge>& queue_depth_;
  prometheus::Histogram& latency_;
  prometheus::Counter& superseded_;
};

}  // namespace relay::dispatch
