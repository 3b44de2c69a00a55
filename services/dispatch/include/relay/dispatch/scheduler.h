// Every GitHub write of the suite goes through here: a priority queue (L4
// before L3 before L2 before L1; within a level check runs, then re-runs,
// then dispatches, then comments; then first come), a fixed number of
// workers (github.max_concurrency), the budget, and retries: transient
// failures back off exponentially with jitter until github.retry_deadline,
// counted from the job's Submit (time spent queued behind other writes
// counts), rate limits wait as the budget says, permanent failures end at
// once. A redelivery is never attempted again after a failure that may have
// reached GitHub (each POST is a delivery of its own). Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
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
  enum class Kind { kDone, kNoOp, kFailed, kCancelled };
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
};

struct SchedulerOptions {
  int concurrency = 8;
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

  // `done` runs once, on a worker thread, with the final result.
  // `wanted`, when given, is asked before every attempt; false cancels.
  // `before_write` runs just before the job's first write (Executor).
  void Submit(v1::GitHubRequest request, Done done, std::function<bool()> wanted = {},
              Executor::BeforeWrite before_write = {});
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
  void Finish(std::shared_ptr<Job> job, const Verdict& v, JobResult::Kind kind);

  SchedulerOptions options_;
  ExecutorFactory executors_;
  const Clock* clock_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::priority_queue<Ready> ready_;
  std::multimap<std::chrono::steady_clock::time_point, std::shared_ptr<Job>> delayed_;  // backoffs
  uint64_t seq_ = 0;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> workers_;
  std::mt19937_64 rng_{std::random_device{}()};
  prometheus::Family<prometheus::Counter>& calls_;
  prometheus::Family<prometheus::Gauge>& queue_depth_;
  prometheus::Histogram& latency_;
};

}  // namespace relay::dispatch
