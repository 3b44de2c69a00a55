// Carries out one GitHubRequest against the API: the calls it takes (a
// lookup first for check runs and comments, so a retry or replay updates
// rather than duplicates), each under the budget, and one verdict.
// One per worker thread; not thread-safe itself. Its calls go out on a
// connection taken from an ApiPool for the call's length.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "relay/dispatch/budget.h"
#include "relay/github/api.h"
#include "relay/v1/github.pb.h"

namespace relay::dispatch {

struct Verdict {
  enum class Kind {
    kDone,         // GitHub accepted it
    kNoOp,         // nothing to do (a re-run of a run already running)
    kTransient,    // 5xx, timeout, reset: try again later
    kRateLimited,  // a rate limit answered: the budget knows when to go on
    kRetry,        // credentials renewed after a 401 (the App reinstalled, a token revoked): again now
    kPermanent,    // 403, 404, 422, the App not installed on the repository
  };
  Kind kind = Kind::kTransient;
  unsigned http_status = 0;
  std::string error;
  std::string endpoint;  // of the last call, e.g. "POST /repos/{owner}/{repo}/dispatches"
  int64_t installation_id = 0;
  bool not_installed = false;  // permanent because the App is not installed on the repository
  // Its STARTED mark failed: nothing of the write reached GitHub (the mark
  // comes before the first call). `fenced`: refused because another member
  // owns the input partition now.
  bool before_write = false;
  bool fenced = false;
};

std::string_view KindName(const v1::GitHubRequest& request);  // dispatch | rerun | suite_rerun | check_run | comment | redelivery

// A 429, or a 403 that is a secondary rate limit (Retry-After, or GitHub's
// message saying so: it often sends no header).
bool IsSecondaryLimit(const github::ApiResult& result);

// One call under the budget, in two halves around the call itself (shared by
// the executor and the redelivery reconciler's listing): waits for the
// grant in short sleeps (false when `stopped` turned true meanwhile), then
// tells the budget how the call ended (its status, rate-limit headers and
// whether it was a secondary limit; a call that failed to send: status 0).
bool AwaitGrant(CallBudget& budget, const Clock& clock, int64_t installation, bool write,
                const std::function<bool()>& stopped);
void ObserveAnswer(CallBudget& budget, int64_t installation, bool write,
                   const absl::StatusOr<github::ApiResult>& result);

// The GitHub connections a scheduler's workers share: at most size() calls
// at once (github.max_concurrency), each on a connection of its own, taken
// for one call. Workers outnumber the connections (github.workers): a worker
// also waits for the budget and for its write's STARTED mark (a fenced
// Kafka transaction, tens of ms under load), and neither holds a
// connection, so the marks of many writes share one transaction while the
// calls stay within GitHub's concurrency. A granted call waits for a
// connection at most `grant_wait` (github.budget_lease: the shared budget
// counts a grant's call within its lease); Executor then asks the budget
// again. Thread-safe.
class ApiPool {
 public:
  ApiPool(std::function<std::unique_ptr<http::Client>()> connect, github::AppCredentials* credentials, int size,
          std::chrono::milliseconds grant_wait = std::chrono::hours(1));

  // A connection for one call (or one installation lookup): waits for a
  // free one; given back when the lease ends.
  class Lease {
   public:
    Lease(ApiPool* pool, github::Api* api) : pool_(pool), api_(api) {}
    Lease(Lease&& o) noexcept : pool_(std::exchange(o.pool_, nullptr)), api_(o.api_) {}
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    Lease& operator=(Lease&&) = delete;
    ~Lease() {
      if (pool_) pool_->Give(api_);
    }
    github::Api* operator->() const { return api_; }

   private:
    ApiPool* pool_;
    github::Api* api_;
  };
  // A free connection; nullopt when none came free within `wait` or `stop`
  // turned true meanwhile.
  std::optional<Lease> Take(const std::atomic<bool>& stop, std::chrono::milliseconds wait);
  std::chrono::milliseconds grant_wait() const { return grant_wait_; }
  size_t size() const { return apis_.size(); }

 private:
  void Give(github::Api* api);

  std::vector<std::unique_ptr<github::Api>> apis_;
  std::chrono::milliseconds grant_wait_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<github::Api*> free_;
};

class Executor {
 public:
  // Called just before the request's first write goes out (the ledger's
  // STARTED mark, which may also refuse a write no longer wanted); an error
  // makes the verdict transient without a call.
  using BeforeWrite = std::function<absl::Status()>;
  // Whether a repo is one the relay may write to (suite re-runs reach
  // repos named by check runs); empty: every repo.
  using IsListed = std::function<bool(const std::string& repo)>;

  // Calls on the pool's connections.
  Executor(std::shared_ptr<ApiPool> pool, CallBudget* budget, const Clock* clock, IsListed listed = {});
  // Calls on a connection of its own.
  Executor(std::unique_ptr<http::Client> client, github::AppCredentials* credentials, CallBudget* budget,
           const Clock* clock, IsListed listed = {});

  // `stop` ends budget waits early (the verdict is then transient).
  // `wanted`, when given, is asked again between a write's STARTED mark and
  // its call (the wait for a connection lies between): false ends the
  // attempt unsent, transient (the scheduler then cancels the job).
  // `granted`, when given, runs once the request's first call has its
  // budget grant (the scheduler's admission: see Scheduler).
  Verdict Execute(const v1::GitHubRequest& request, const std::atomic<bool>& stop, const BeforeWrite& before_write,
                  const std::function<bool()>& wanted = {}, const std::function<void()>& granted = {});

 private:
  // One call under the budget; nullopt when stopped while waiting.
  std::optional<absl::StatusOr<github::ApiResult>> Call(const github::ApiCall& call, bool write,
                                                         const std::atomic<bool>& stop, Verdict* verdict);
  Verdict Dispatch(const v1::GitHubRequest& r, const std::atomic<bool>& stop);
  Verdict Rerun(const std::string& repo, int64_t run_id, const std::atomic<bool>& stop);
  Verdict SuiteRerun(const v1::GitHubRequest& r, const std::atomic<bool>& stop);
  Verdict CheckRun(const v1::GitHubRequest& r, const std::atomic<bool>& stop);
  Verdict Comment(const v1::GitHubRequest& r, const std::atomic<bool>& stop);
  Verdict Redeliver(const v1::GitHubRequest& r, const std::atomic<bool>& stop);
  bool Started(Verdict* verdict);

  std::shared_ptr<ApiPool> pool_;
  CallBudget* budget_;
  const Clock* clock_;
  IsListed listed_;
  const BeforeWrite* before_write_ = nullptr;  // of the request in hand
  const std::function<bool()>* wanted_ = nullptr;  // of the request in hand
  const std::function<void()>* granted_ = nullptr;  // of the request in hand
  bool started_ = false;                       // before_write ran for it
  bool mark_failed_ = false, mark_fenced_ = false;  // before_write refused this attempt (fenced: by a newer owner)
};

}  // namespace relay::dispatch
