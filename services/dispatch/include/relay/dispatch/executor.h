// Carries out one GitHubRequest against the API: the calls it takes (a
// lookup first for check runs and comments, so a retry or replay updates
// rather than duplicates), each under the budget, and one verdict.
// One per worker thread (it owns a connection); not thread-safe itself.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>

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

class Executor {
 public:
  // Called just before the request's first write goes out (the ledger's
  // STARTED mark, which may also refuse a write no longer wanted); an error
  // makes the verdict transient without a call.
  using BeforeWrite = std::function<absl::Status()>;
  // Whether a repo is one the relay may write to (suite re-runs reach
  // repos named by check runs); empty: every repo.
  using IsListed = std::function<bool(const std::string& repo)>;

  Executor(std::unique_ptr<http::Client> client, github::AppCredentials* credentials, CallBudget* budget,
           const Clock* clock, IsListed listed = {});

  // `stop` ends budget waits early (the verdict is then transient).
  Verdict Execute(const v1::GitHubRequest& request, const std::atomic<bool>& stop, const BeforeWrite& before_write);

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

  github::Api api_;
  CallBudget* budget_;
  const Clock* clock_;
  IsListed listed_;
  const BeforeWrite* before_write_ = nullptr;  // of the request in hand
  bool started_ = false;                       // before_write ran for it
};

}  // namespace relay::dispatch
