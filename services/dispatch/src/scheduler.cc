#include "relay/dispatch/scheduler.h"

#include "absl/strings/ascii.h"
#include "relay/base/log.h"
#include "relay/github/event_time.h"

namespace relay::dispatch {

namespace {

int KindRank(const v1::GitHubRequest& r) {
  switch (r.call_case()) {
    case v1::GitHubRequest::kCheckRun: return 0;
    case v1::GitHubRequest::kRerun:
    case v1::GitHubRequest::kSuiteRerun: return 1;
    case v1::GitHubRequest::kDispatch: return 2;
    case v1::GitHubRequest::kRedelivery: return 4;  // webhook redeliveries after everything
    default: return 3;  // comments
  }
}

std::string LevelLabel(int level) { return level >= 1 && level <= 4 ? "L" + std::to_string(level) : "none"; }

}  // namespace

std::string SupersedeKey(const v1::GitHubRequest& r) {
  if (!r.has_dispatch()) return "";
  const auto& d = r.dispatch();
  if (d.event() != "pull_request" || d.pr_number() <= 0 || d.head_sha().empty()) return "";
  if (d.action() != "opened" && d.action() != "reopened" && d.action() != "synchronize") return "";
  return absl::AsciiStrToLower(d.upstream_repo()) + "#" + std::to_string(d.pr_number()) + ">" +
         absl::AsciiStrToLower(r.repo());
}

Scheduler::Scheduler(SchedulerOptions options, ExecutorFactory executors, const Clock* clock,
                     prometheus::Registry* metrics)
    : options_(options),
      executors_(std::move(executors)),
      clock_(clock),
      calls_(prometheus::BuildCounter()
                 .Name("relay_github_calls_total")
                 .Help("GitHub API calls by endpoint and HTTP status (0: no answer)")
                 .Register(*metrics)),
      queue_depth_(prometheus::BuildGauge()
                       .Name("relay_github_queue_depth")
                       .Help("GitHub writes waiting for a worker, by priority level")
                       .Register(*metrics)),
      latency_(prometheus::BuildHistogram()
                   .Name("relay_github_write_seconds")
                   .Help("From a write's first attempt to its result")
                   .Register(*metrics)
                   .Add({}, prometheus::Histogram::BucketBoundaries{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5,
                                                                    5, 10, 30, 60, 300})),
      superseded_(prometheus::BuildCounter()
                      .Name("relay_dispatch_writes_superseded_total")
                      .Help("Pull request dispatches not sent because a newer head of the same PR was queued for "
                            "the same repository before they started")
                      .Register(*metrics)
                      .Add({})) {
  for (const char* l : {"L4", "L3", "L2", "L1", "none"}) queue_depth_.Add({{"level", l}});
  const int workers = std::max(options_.concurrency, options_.workers);
  for (int i = 0; i < workers; ++i) workers_.emplace_back([this] { Work(); });
  finisher_ = std::thread([this] { FinishSuperseded(); });
}

Scheduler::~Scheduler() { Stop(); }

void Scheduler::Submit(v1::GitHubRequest request, Done done, std::function<bool()> wanted,
                       Executor::BeforeWrite before_write, std::string coalesce_key) {
  auto job = std::make_shared<Job>();
  job->request = std::move(request);
  job->done = std::move(done);
  job->wanted = std::move(wanted);
  job->enqueued = clock_->Now();
  job->coalesce_key = std::move(coalesce_key);
  if (job->coalesce_key.empty()) {
    job->before_write = std::move(before_write);
  } else {
    // Started and superseded decided under one lock: a job either writes
    // (and is never superseded after) or is superseded and never writes.
    Job* j = job.get();  // the job outlives its executions
    job->before_write = [this, j, user = std::move(before_write)]() -> absl::Status {
      {
        std::lock_guard lock(mu_);
        if (j->superseded) return absl::CancelledError("superseded by " + j->superseded_by);
        j->started = true;
      }
      return user ? user() : absl::OkStatus();
    };
  }
  {
    std::lock_guard lock(mu_);
    if (!job->coalesce_key.empty()) SupersedeLocked(job);
  }
  Enqueue(std::move(job));
}

void Scheduler::SupersedeLocked(const std::shared_ptr<Job>& job) {
  std::shared_ptr<Job>& newest = newest_[job->coalesce_key];
  if (newest && !newest->finished && IsOlderHead(*job, *newest)) {
    // The PR's older head, come after its newer one (GitHub delivered out
    // of order, or a redelivery): this one is superseded, whatever the
    // newer's state, and the newer stays the PR's newest.
    MarkSupersededLocked(job, newest->request.id());
    return;
  }
  std::shared_ptr<Job> older = std::exchange(newest, job);
  if (!older || older->started || older->superseded || older->finished) return;
  // The same head again (a redelivery of the event) is not newer.
  if (older->request.dispatch().head_sha() == job->request.dispatch().head_sha()) return;
  MarkSupersededLocked(older, job->request.id());
}

void Scheduler::MarkSupersededLocked(const std::shared_ptr<Job>& job, const std::string& by) {
  job->superseded = true;
  job->superseded_by = by;
  superseded_.Increment();
  if (!job->in_worker) {
    // Queued, in a backoff or not yet queued: its result now, from the
    // finisher (the submitter may hold its own locks); the worker that
    // pops it drops it.
    job->finished = true;
    to_finish_.push_back(job);
    finish_cv_.notify_one();
  }
}

bool Scheduler::IsOlderHead(const Job& a, const Job& b) {
  const v1::DispatchCall& x = a.request.dispatch();
  const v1::DispatchCall& y = b.request.dispatch();
  if (x.event_at_unix_ms() <= 0 || y.event_at_unix_ms() <= 0 || x.head_sha() == y.head_sha()) return false;
  return github::EventTime{x.event_at_unix_ms(), x.received_at_unix_ms()} <
         github::EventTime{y.event_at_unix_ms(), y.received_at_unix_ms()};
}

void Scheduler::FinishSuperseded() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    finish_cv_.wait_for(lock, std::chrono::milliseconds(50));
    while (!to_finish_.empty() && !stop_) {
      auto job = std::move(to_finish_.front());
      to_finish_.pop_front();
      lock.unlock();
      Finish(job, Verdict{Verdict::Kind::kTransient, 0, "superseded by " + job->superseded_by, "", 0},
             JobResult::Kind::kSuperseded);
      lock.lock();
    }
  }
}

void Scheduler::Enqueue(std::shared_ptr<Job> job) {
  {
    std::lock_guard lock(mu_);
    job->in_worker = false;
    queue_depth_.Add({{"level", LevelLabel(job->request.level())}}).Increment();
    ready_.push(Ready{job->request.level(), KindRank(job->request), seq_++, std::move(job)});
  }
  cv_.notify_one();
}

size_t Scheduler::Queued() const {
  std::lock_guard lock(mu_);
  return ready_.size() + delayed_.size();
}

void Scheduler::Stop() {
  if (stop_.exchange(true)) return;
  cv_.notify_all();
  {
    std::lock_guard lock(mu_);  // the finisher sees stop_ after its wait
  }
  finish_cv_.notify_all();
  for (auto& w : workers_) {
    if (w.joinable()) w.join();
  }
  if (finisher_.joinable()) finisher_.join();
}

void Scheduler::Finish(std::shared_ptr<Job> job, const Verdict& v, JobResult::Kind kind) {
  JobResult result;
  if (!job->coalesce_key.empty()) {
    std::lock_guard lock(mu_);
    job->finished = true;  // from here no newer job supersedes it
    result.superseded_by = job->superseded_by;
    if (auto it = newest_.find(job->coalesce_key); it != newest_.end() && it->second == job) newest_.erase(it);
  }
  result.kind = kind;
  result.http_status = v.http_status;
  result.attempts = job->attempts;
  result.error = v.error;
  result.endpoint = v.endpoint;
  result.installation_id = v.installation_id;
  result.not_installed = v.not_installed;
  result.uncertain_retry = job->maybe_sent && result.attempts > 1;
  if (job->attempts > 0) {  // a job superseded while queued was never attempted
    result.latency = std::chrono::duration_cast<std::chrono::milliseconds>(clock_->Now() - job->first_attempt);
    latency_.Observe(std::chrono::duration<double>(result.latency).count());
  }
  std::move(job->done)(std::move(result));
}

void Scheduler::Work() {
  std::unique_ptr<Executor> executor = executors_();
  while (!stop_) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock lock(mu_);
      for (;;) {
        if (stop_) return;
        // Backoffs that are over go back in line.
        auto now = clock_->Now();
        while (!delayed_.empty() && delayed_.begin()->first <= now) {
          auto j = delayed_.begin()->second;
          delayed_.erase(delayed_.begin());
          queue_depth_.Add({{"level", LevelLabel(j->request.level())}}).Increment();
          ready_.push(Ready{j->request.level(), KindRank(j->request), seq_++, std::move(j)});
        }
        if (!ready_.empty() && admitted_ < options_.concurrency) break;
        // Real time for the wait: a FakeClock in tests only decides due-ness.
        cv_.wait_for(lock, std::chrono::milliseconds(50));
      }
      job = ready_.top().job;
      ready_.pop();
      queue_depth_.Add({{"level", LevelLabel(job->request.level())}}).Decrement();
      if (job->finished) continue;  // superseded while queued: its result is given
      job->in_worker = true;
      ++admitted_;
    }
    // Once: at the job's first grant, or when its attempt ends without one.
    bool admission_open = true;
    auto admitted = [this, &admission_open] {
      if (!std::exchange(admission_open, false)) return;
      {
        std::lock_guard lock(mu_);
        --admitted_;
      }
      cv_.notify_one();
    };
    if (job->attempts == 0) job->first_attempt = clock_->Now();
    if (job->wanted && !job->wanted()) {
      admitted();
      Finish(job, Verdict{Verdict::Kind::kTransient, 0, "cancelled", "", 0}, JobResult::Kind::kCancelled);
      continue;
    }
    ++job->attempts;
    Verdict v = executor->Execute(job->request, stop_, job->before_write, job->wanted, admitted);
    admitted();
    calls_.Add({{"endpoint", v.endpoint.empty() ? std::string(KindName(job->request)) : v.endpoint},
                {"status", std::to_string(v.http_status)}})
        .Increment();
    bool superseded = false;
    if (!job->coalesce_key.empty()) {
      std::lock_guard lock(mu_);
      superseded = job->superseded;  // set only before its first write: nothing was sent
    }
    if (superseded) {
      Finish(job, Verdict{Verdict::Kind::kTransient, 0, "superseded by " + job->superseded_by, "", 0},
             JobResult::Kind::kSuperseded);
      continue;
    }
    // No longer wanted (its partition went to another member while it ran,
    // e.g. between its mark and its call): ends now, not after a backoff.
    if (v.kind == Verdict::Kind::kTransient && job->wanted && !job->wanted()) {
      Finish(job, v, JobResult::Kind::kCancelled);
      continue;
    }
    switch (v.kind) {
      case Verdict::Kind::kDone:
        Finish(job, v, JobResult::Kind::kDone);
        continue;
      case Verdict::Kind::kNoOp:
        Finish(job, v, JobResult::Kind::kNoOp);
        continue;
      case Verdict::Kind::kPermanent:
        log::Warn("GitHub write failed for good",
                  {{"request_id", job->request.id()}, {"repo", job->request.repo()}, {"error", v.error}});
        Finish(job, v, JobResult::Kind::kFailed);
        continue;
      case Verdict::Kind::kRateLimited:
        // The budget has what the answer said; it holds the next attempt.
        Enqueue(std::move(job));
        continue;
      case Verdict::Kind::kRetry:
        // Credentials renewed: again at once, under the budget. Bounded:
        // Api backs an installation off after fresh credentials fail.
        if (++job->credential_retries <= 4) {
          Enqueue(std::move(job));
          continue;
        }
        break;
      case Verdict::Kind::kTransient:
        // After sending, or a gateway error: GitHub may have it already.
        if (v.error.find("after sending") != std::string::npos || v.http_status == 502 || v.http_status == 504) {
          job->maybe_sent = true;
        }
        break;
    }
    if (stop_) continue;  // stopping: the job is dropped (see Stop)
    if (v.kind == Verdict::Kind::kTransient && v.before_write &&
        (v.fenced || clock_->Now() - job->enqueued >= options_.retry_deadline)) {
      // Its mark failed, so nothing reached GitHub: not a write to
      // dead-letter. Fenced (its partition has another owner), or its mark
      // still refused at the deadline: cancelled, so the batch that asked
      // for it comes again and its owner plans it anew.
      log::Warn("GitHub write not started: its ledger mark failed; the batch comes again",
                {{"request_id", job->request.id()}, {"error", v.error}});
      Finish(job, v, JobResult::Kind::kCancelled);
      continue;
    }
    if (job->maybe_sent && job->request.call_case() == v1::GitHubRequest::kRedelivery) {
      // Not repeated: a second POST would be a second delivery.
      v.error = "may have reached GitHub, a redelivery is not repeated: " + v.error;
      log::Warn("GitHub redelivery not retried", {{"request_id", job->request.id()}, {"error", v.error}});
      Finish(job, v, JobResult::Kind::kFailed);
      continue;
    }
    // From the Submit, not the first attempt: a job queued behind other
    // writes for longer than its deadline is not retried (the redelivery
    // reconciler asks again for requests whose deadline passed unsent).
    if (clock_->Now() - job->enqueued >= options_.retry_deadline) {
      v.error = "gave up after " + std::to_string(job->attempts) + " attempts: " + v.error;
      log::Warn("GitHub write abandoned at its retry deadline",
                {{"request_id", job->request.id()}, {"repo", job->request.repo()}, {"error", v.error}});
      Finish(job, v, JobResult::Kind::kFailed);
      continue;
    }
    // Exponential backoff with full jitter: retries of many writes that
    // failed together do not come back together.
    job->backoff = job->backoff.count() == 0 ? options_.backoff_min : std::min(job->backoff * 2, options_.backoff_max);
    std::chrono::milliseconds wait;
    {
      std::lock_guard lock(mu_);
      wait = std::chrono::milliseconds(
          std::uniform_int_distribution<int64_t>(job->backoff.count() / 2, job->backoff.count())(rng_));
      job->in_worker = false;
      delayed_.emplace(clock_->Now() + wait, job);
    }
    log::Info("GitHub write will be retried",
              {{"request_id", job->request.id()}, {"error", v.error}, {"in_ms", wait.count()}});
  }
}

}  // namespace relay::dispatch
