// The job state machine of one ci.callbacks partition: every downstream
// job (delivery, repo, run id, attempt, job name) goes DISPATCHED ->
// IN_PROGRESS -> COMPLETED, and this decides each callback against it.
// Pure logic: the owner (collector_service.cc) feeds it the dispatches of
// its partition, restores it from collector.state, and makes its decisions
// durable. Not thread-safe: one owner thread, or the caller's lock.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "relay/v1/collector.pb.h"
#include "relay/v1/dispatch.pb.h"
#include "relay/v1/github.pb.h"

namespace relay::collector {

struct Decision {
  int http_status = 200;
  std::string outcome;  // accepted | replayed | refused | no_op (a sweep that found nothing to do)
  std::string reason;   // why refused, for the caller; "" otherwise
  std::string job_id;
  std::string state;    // the job's state after the decision ("" when it has none)
  // What to make durable, accepted and replayed alike (a replay writes the
  // same records again: their ids make that harmless, and it repairs a
  // crash between the state and its effects).
  std::optional<v1::JobState> job;
  std::optional<v1::JobResult> result;
  std::optional<v1::GitHubRequest> check_run;
};

// (upstream repo, PR number) -> the ciflow/crcr devices its labels ask for.
using LabelLookup = std::function<std::set<std::string>(const std::string& upstream_repo, int64_t pr_number)>;

class Jobs {
 public:
  // A dispatch GitHub accepted (relay.dispatches).
  void AddDispatch(const v1::DispatchRecord& dispatch);
  // A job's state from collector.state (on assignment).
  void Restore(v1::JobState job);
  // Decides one callback (or sweep) received at request.received_at_unix_ms
  // and, when accepted, applies it. `now_ms` is the owner's clock (sweeps).
  Decision Apply(const v1::CallbackRequest& request, int64_t now_ms, const LabelLookup& labels);
  // Check-run writes for the current state of every job of an upstream PR
  // that wants them now (its labels changed: an L3 device label may have
  // come after the dispatch, during the run or after it finished).
  std::vector<v1::GitHubRequest> CheckRunsForPullRequest(const std::string& upstream_repo, int64_t pr_number,
                                                         const LabelLookup& labels) const;
  // Jobs in progress since before `cutoff_ms` (relay clock), for the sweeper.
  std::vector<std::string> InProgressSince(int64_t cutoff_ms) const;
  // Forgets dispatches and jobs last changed before `cutoff_ms`, and used
  // tokens expired before `now_unix` (they can no longer verify anyway).
  void Prune(int64_t cutoff_ms, int64_t now_unix);

  const v1::JobState* Find(const std::string& job_id) const;
  size_t jobs() const { return jobs_.size(); }
  size_t dispatches() const { return dispatches_.size(); }

 private:
  struct UsedToken {
    std::string job_id;
    std::string body_sha256;
    int64_t expires_at = 0;
  };
  Decision Refuse(int status, std::string reason, const std::string& job_id, const v1::JobState* job) const;
  Decision Accept(v1::JobState job, const v1::CallbackRequest& request, const LabelLookup& labels);
  Decision Effects(const v1::JobState& job, const LabelLookup& labels, std::string outcome) const;
  const v1::DispatchFact* FindDispatch(const std::string& repo, const std::string& delivery) const;

  std::map<std::string, v1::JobState> jobs_;                          // job id ->
  std::map<std::pair<std::string, std::string>, v1::DispatchFact> dispatches_;  // (repo lower, delivery) ->
  struct SeenSha {
    std::string upstream_repo;
    int64_t at_ms = 0;  // latest dispatch of it
  };
  std::map<std::pair<std::string, std::string>, SeenSha> shas_;  // (repo lower, upstream sha) dispatched
  std::map<std::string, UsedToken> tokens_;                           // token id -> the callback it carried
};

// The job's row for ci.results, built from its state.
v1::JobResult ResultOf(const v1::JobState& job);

// Whether the job's upstream check run is wanted: L4 always, L3 when the
// PR's labels ask for the repo's device.
bool WantsCheckRuns(const v1::JobState& job, const LabelLookup& labels);
// The check-run write for the job's current state, on the dispatched
// commit (none while the dispatch record is unknown). Its id is the job and
// version: asking again for the same state is the same write.
std::optional<v1::GitHubRequest> CheckRunFor(const v1::JobState& job);

}  // namespace relay::collector
