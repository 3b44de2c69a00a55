// The job state machine of one ci.callbacks partition: every downstream
// job (delivery, repo, run id, attempt, job name) goes DISPATCHED ->
// IN_PROGRESS -> COMPLETED, and this decides each callback against it.
// Pure logic: the owner (collector_service.cc) feeds it the dispatches of
// its partition, restores it from collector.state, and makes its decisions
// durable. Not thread-safe: one owner thread, or the caller's lock.
#pragma once

#include <array>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
#include "absl/status/statusor.h"
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

// Decided jobs are kept compact. A job in progress, or decided but whose
// state record is not yet durable, is held whole (v1::JobState, ~1.5 KB);
// once its completed state is durable at a known offset of collector.state
// (Stored, or Restore at assignment) only a compact form stays in memory
// (a 16-byte key and 24 bytes: state record offset, completion time,
// version, conclusion, a key of its PR: under 100 bytes with the hash
// table's own slack, measured). What needs the whole state again (a replay
// of its last callback, check runs for a label added later) reads it back
// from collector.state at that offset through the StateFetcher.
class Jobs {
 public:
  // Reads a job's whole state at `offset` of this partition's
  // collector.state (Unavailable etc. as Kafka answers).
  using StateFetcher = std::function<absl::StatusOr<v1::JobState>(int64_t offset)>;
  explicit Jobs(StateFetcher fetch = {}) : fetch_(std::move(fetch)) {}

  // A dispatch GitHub accepted (relay.dispatches).
  void AddDispatch(const v1::DispatchRecord& dispatch);
  // A job's state from collector.state (on assignment), at `offset` of it
  // (-1: not known: kept whole). Tokens already expired at `now_unix` (plus
  // their grace) are not kept.
  void Restore(v1::JobState job, int64_t offset = -1, int64_t now_unix = 0);
  // Decides one callback (or sweep) received at request.received_at_unix_ms
  // and, when accepted, applies it. `now_ms` is the owner's clock (sweeps).
  // An error only when a decided job's state could not be read back (the
  // callback is to be decided again later).
  absl::StatusOr<Decision> Apply(const v1::CallbackRequest& request, int64_t now_ms, const LabelLookup& labels);
  // The state record of `job_id` at `version` is durable at `offset` of
  // collector.state: a decided job at that version is then kept compact.
  void Stored(const std::string& job_id, int32_t version, int64_t offset);
  // Check-run writes for the current state of every job of an upstream PR
  // that wants them now (its labels changed: an L3 device label may have
  // come after the dispatch, during the run or after it finished).
  absl::StatusOr<std::vector<v1::GitHubRequest>> CheckRunsForPullRequest(const std::string& upstream_repo,
                                                                         int64_t pr_number,
                                                                         const LabelLookup& labels) const;
  // Jobs in progress since before `cutoff_ms` (relay clock), for the sweeper.
  std::vector<std::string> InProgressSince(int64_t cutoff_ms) const;
  // Forgets dispatches and jobs last changed before `cutoff_ms`, and used
  // tokens expired before `now_unix` (they can no longer verify anyway).
  void Prune(int64_t cutoff_ms, int64_t now_unix);

  // A job held whole (in progress, or decided and not yet stored); null
  // otherwise.
  const v1::JobState* Find(const std::string& job_id) const;
  size_t jobs() const { return jobs_.size() + decided_.size(); }
  size_t decided() const { return decided_.size(); }  // compact
  size_t dispatches() const { return dispatches_.size(); }

 private:
  struct UsedToken {
    std::string job_id;
    std::string body_sha256;
    int64_t expires_at = 0;
  };
  // The compact form of a decided job (see the class comment).
  using JobKey = std::array<uint8_t, 16>;
  struct JobKeyHash {
    size_t operator()(const JobKey& k) const {
      size_t h;
      std::memcpy(&h, k.data(), sizeof h);  // the key is a digest: already uniform
      return h;
    }
  };
  struct DecidedJob {
    int64_t state_offset = -1;  // of its last state record in this partition of collector.state
    uint32_t completed_s = 0;   // unix seconds (history pruning)
    uint32_t pr_key = 0;        // PrKey of its upstream PR; 0: none
    int32_t version = 0;
    uint8_t conclusion = 0;     // index in kConclusions
  };
  static JobKey KeyOf(const std::string& job_id);
  static uint32_t PrKey(const std::string& upstream_repo, int64_t pr_number);
  void Compact(const v1::JobState& job, int64_t offset);
  absl::StatusOr<v1::JobState> Whole(const JobKey& key, const DecidedJob& d) const;

  Decision Refuse(int status, std::string reason, const std::string& job_id, const std::string& state) const;
  Decision Accept(v1::JobState job, const v1::CallbackRequest& request, const LabelLookup& labels);
  Decision Effects(const v1::JobState& job, const LabelLookup& labels, std::string outcome) const;
  const v1::DispatchFact* FindDispatch(const std::string& repo, const std::string& delivery) const;

  StateFetcher fetch_;
  // Hashed, not ordered: a callback looks its job and its token up, and
  // both maps hold every job of the history (a std::map's ~17 comparisons
  // of long, common-prefixed strings per lookup were 5% of the collector's
  // CPU under load: docs/benchmarks.md). Nodes, so a job's address holds.
  absl::node_hash_map<std::string, v1::JobState> jobs_;               // job id -> held whole
  absl::flat_hash_map<JobKey, DecidedJob, JobKeyHash> decided_;       // compact
  std::map<std::pair<std::string, std::string>, v1::DispatchFact> dispatches_;  // (repo lower, delivery) ->
  struct SeenSha {
    std::string upstream_repo;
    int64_t at_ms = 0;  // latest dispatch of it
  };
  std::map<std::pair<std::string, std::string>, SeenSha> shas_;  // (repo lower, upstream sha) dispatched
  absl::node_hash_map<std::string, UsedToken> tokens_;                // token id -> the callback it carried
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
