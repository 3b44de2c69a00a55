#include "relay/collector/jobs.h"

#include <algorithm>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "relay/base/digest.h"
#include "relay/base/status.h"
#include "relay/github/webhook_signature.h"
#include "relay/collector/callback.h"
#include "relay/github/check_runs.h"

namespace relay::collector {
namespace {

constexpr char kInProgress[] = "in_progress";
constexpr char kCompleted[] = "completed";
constexpr int64_t kTokenGraceSeconds = 300;
// The conclusions callback.cc accepts, by index (DecidedJob::conclusion).
constexpr const char* kConclusions[] = {"success", "failure", "cancelled", "skipped", "timed_out",
                                        "neutral", "action_required", "stale", "unknown"};
constexpr uint8_t kUnknownConclusion = 8;

uint8_t ConclusionIndex(const std::string& c) {
  for (uint8_t i = 0; i < kUnknownConclusion; ++i) {
    if (c == kConclusions[i]) return i;
  }
  return kUnknownConclusion;
}

std::string Lower(std::string_view s) { return absl::AsciiStrToLower(std::string(s)); }

// A job as its first accepted callback makes it.
v1::JobState NewJob(const std::string& id, const v1::CallbackRequest& req, const char* state) {
  v1::JobState job;
  job.set_job_id(id);
  job.set_repo(req.repo());
  job.set_delivery_id(req.delivery_id());
  job.set_run_id(req.workflow().run_id());
  job.set_run_attempt(req.workflow().run_attempt());
  job.set_job_name(req.workflow().job_name());
  job.set_state(state);
  return job;
}

}  // namespace

void Jobs::AddDispatch(const v1::DispatchRecord& d) {
  v1::DispatchFact fact;
  fact.set_dispatched_at_unix_ms(d.dispatched_at_unix_ms());
  fact.set_level(d.level());
  fact.set_upstream_repo(d.upstream_repo());
  fact.set_pr_number(d.pr_number());
  fact.set_head_sha(d.head_sha());
  fact.set_event(d.event());
  std::string repo = Lower(d.downstream_repo());
  if (!d.head_sha().empty()) {
    auto [it, fresh] = shas_.try_emplace({repo, Lower(d.head_sha())}, SeenSha{d.upstream_repo(), d.dispatched_at_unix_ms()});
    if (!fresh) it->second.at_ms = std::max(it->second.at_ms, d.dispatched_at_unix_ms());
  }
  // A dispatch made again after a restart keeps its first time.
  dispatches_.try_emplace({repo, d.delivery_id()}, std::move(fact));
}

void Jobs::Restore(v1::JobState job, int64_t offset, int64_t now_unix) {
  for (const auto& a : job.accepted()) {
    if (a.token_expires_at_unix() + kTokenGraceSeconds < now_unix) continue;  // can no longer verify
    tokens_[a.token_id()] = UsedToken{job.job_id(), a.body_sha256(), a.token_expires_at_unix()};
  }
  if (job.state() == kCompleted && offset >= 0) {
    jobs_.erase(job.job_id());
    Compact(job, offset);
    return;
  }
  decided_.erase(KeyOf(job.job_id()));
  std::string id = job.job_id();
  jobs_[id] = std::move(job);
}

void Jobs::Stored(const std::string& job_id, int32_t version, int64_t offset) {
  if (offset < 0) return;
  auto it = jobs_.find(job_id);
  if (it == jobs_.end() || it->second.state() != kCompleted || it->second.version() != version) return;
  Compact(it->second, offset);
  jobs_.erase(it);
}

Jobs::JobKey Jobs::KeyOf(const std::string& job_id) {
  JobKey key{};
  // Job ids are hex SHA-256 (callback.h JobId): the first 16 bytes of it.
  if (job_id.size() >= 32 && absl::c_all_of(job_id.substr(0, 32), [](char c) { return absl::ascii_isxdigit(c); })) {
    std::string raw = absl::HexStringToBytes(job_id.substr(0, 32));
    std::memcpy(key.data(), raw.data(), key.size());
    return key;
  }
  auto digest = Sha256(job_id);
  std::memcpy(key.data(), digest.data(), key.size());
  return key;
}

uint32_t Jobs::PrKey(const std::string& upstream_repo, int64_t pr_number) {
  if (pr_number <= 0 || upstream_repo.empty()) return 0;
  auto digest = Sha256(Lower(upstream_repo) + "#" + std::to_string(pr_number));
  uint32_t k;
  std::memcpy(&k, digest.data(), sizeof k);
  return k == 0 ? 1 : k;
}

void Jobs::Compact(const v1::JobState& job, int64_t offset) {
  DecidedJob d;
  d.state_offset = offset;
  d.completed_s = static_cast<uint32_t>(std::max<int64_t>(0, job.completed_at_unix_ms() / 1000));
  d.pr_key = PrKey(job.upstream_repo(), job.pr_number());
  d.version = job.version();
  d.conclusion = ConclusionIndex(job.conclusion());
  decided_[KeyOf(job.job_id())] = d;
}

absl::StatusOr<v1::JobState> Jobs::Whole(const JobKey& key, const DecidedJob& d) const {
  if (!fetch_) return absl::FailedPreconditionError("no way to read a decided job's state back");
  RELAY_ASSIGN_OR_RETURN(v1::JobState job, fetch_(d.state_offset));
  if (KeyOf(job.job_id()) != key || job.version() != d.version) {
    return absl::DataLossError("collector.state at offset " + std::to_string(d.state_offset) +
                               " is not the decided job's last state");
  }
  return job;
}

const v1::JobState* Jobs::Find(const std::string& job_id) const {
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? nullptr : &it->second;
}

static void SetDispatch(v1::JobState& job, const v1::DispatchFact& fact) {
  job.set_upstream_repo(fact.upstream_repo());
  job.set_pr_number(fact.pr_number());
  job.set_head_sha(fact.head_sha());
  job.set_event(fact.event());
}

const v1::DispatchFact* Jobs::FindDispatch(const std::string& repo, const std::string& delivery) const {
  auto it = dispatches_.find({Lower(repo), delivery});
  return it == dispatches_.end() ? nullptr : &it->second;
}

Decision Jobs::Refuse(int status, std::string reason, const std::string& job_id, const std::string& state) const {
  Decision d;
  d.http_status = status;
  d.outcome = "refused";
  d.reason = std::move(reason);
  d.job_id = job_id;
  d.state = state;
  return d;
}

v1::JobResult ResultOf(const v1::JobState& job) {
  const v1::CallbackRequest& last = job.last();
  const v1::WorkflowReport& wf = last.workflow();
  v1::JobResult r;
  r.set_job_id(job.job_id());
  r.set_version(job.version());
  v1::TrustedJobFacts& t = *r.mutable_trusted();
  t.set_status(job.state());
  t.set_verified_repo(last.repo());
  t.set_repository_id(last.repository_id());
  t.set_level(last.level());
  t.set_delivery_id(job.delivery_id());
  t.set_upstream_repo(job.upstream_repo());
  t.set_pr_number(job.pr_number());
  t.set_head_sha(job.head_sha());
  t.set_event(job.event());
  t.set_dispatched_at_unix_ms(job.dispatched_at_unix_ms());
  t.set_dispatched_at_source(job.dispatched_at_source());
  t.set_started_at_unix_ms(job.in_progress_at_unix_ms());
  t.set_completed_at_unix_ms(job.completed_at_unix_ms());
  const int64_t queued_from =
      job.queued_from_unix_ms() > 0 ? job.queued_from_unix_ms() : job.dispatched_at_unix_ms();
  t.set_queue_time_ms(job.dispatched_at_unix_ms() > 0 && job.in_progress_at_unix_ms() > 0
                          ? std::max<int64_t>(0, job.in_progress_at_unix_ms() - queued_from)
                          : -1);
  t.set_execution_time_ms(job.completed_at_unix_ms() > 0 && job.in_progress_at_unix_ms() > 0
                              ? std::max<int64_t>(0, job.completed_at_unix_ms() - job.in_progress_at_unix_ms())
                              : -1);
  t.set_timed_out_by_sweeper(job.timed_out_by_sweeper());
  v1::ReportedJobFacts& rep = *r.mutable_reported();
  rep.set_event_type(last.event_type());
  rep.set_conclusion(job.conclusion());
  rep.set_workflow_name(wf.name());
  rep.set_workflow_run_url(wf.url());
  rep.set_job_name(job.job_name());
  rep.set_check_run_id(wf.check_run_id());
  rep.set_run_id(job.run_id());
  rep.set_run_attempt(job.run_attempt());
  rep.set_upstream_repo(last.upstream_repo());
  rep.set_pr_number(last.pr_number());
  rep.set_head_sha(last.head_sha());
  rep.set_has_test_results(wf.has_test_results());
  rep.set_tests_total(wf.tests_total());
  rep.set_tests_passed(wf.tests_passed());
  rep.set_tests_failed(wf.tests_failed());
  rep.set_tests_skipped(wf.tests_skipped());
  for (const auto& f : wf.failed_tests()) rep.add_failed_tests(f);
  rep.set_artifact_url(wf.artifact_url());
  return r;
}

std::optional<v1::GitHubRequest> CheckRunFor(const v1::JobState& job) {
  // Only on the commit the relay dispatched (never one the payload names).
  if (job.upstream_repo().empty() || job.head_sha().empty()) return std::nullopt;
  const v1::CallbackRequest& last = job.last();
  v1::GitHubRequest req;
  req.set_id(github::RequestId({"check_run", job.job_id(), std::to_string(job.version())}));
  req.set_repo(job.upstream_repo());
  req.set_level(last.level());
  req.set_delivery_id(job.delivery_id());
  req.set_requested_at_unix_ms(job.state() == kCompleted ? job.completed_at_unix_ms() : job.in_progress_at_unix_ms());
  v1::CheckRunCall& call = *req.mutable_check_run();
  call.set_name(github::CheckRunName(job.repo(), last.workflow().name(), job.job_name()));
  call.set_head_sha(job.head_sha());
  call.set_external_id(github::CheckRunExternalId(job.run_id(), job.run_attempt(), job.job_name()));
  call.set_status(job.state());
  call.set_details_url(last.workflow().url());
  if (job.state() == kCompleted) {
    call.set_conclusion(job.conclusion());
    call.set_title(job.job_name() + " on " + job.repo() + ": " + job.conclusion());
  } else {
    call.set_title(job.job_name() + " on " + job.repo() + ": running");
  }
  std::string summary = "Reported by " + job.repo() + " (level L" + std::to_string(last.level()) + "), run " +
                        job.run_id() + " attempt " + job.run_attempt() + ".";
  if (last.workflow().has_test_results()) {
    summary += " Tests: " + std::to_string(last.workflow().tests_passed()) + " passed, " +
               std::to_string(last.workflow().tests_failed()) + " failed, " +
               std::to_string(last.workflow().tests_skipped()) + " skipped.";
  }
  if (job.timed_out_by_sweeper()) summary += " No completion was reported in time: timed out by the relay.";
  call.set_summary(summary);
  return req;
}

bool WantsCheckRuns(const v1::JobState& job, const LabelLookup& labels) {
  const v1::CallbackRequest& last = job.last();
  if (last.level() >= 4) return true;
  return last.level() == 3 && !last.device().empty() && job.pr_number() > 0 && labels &&
         labels(job.upstream_repo(), job.pr_number()).count(last.device()) > 0;
}

Decision Jobs::Effects(const v1::JobState& job, const LabelLookup& labels, std::string outcome) const {
  Decision d;
  d.http_status = 200;
  d.outcome = std::move(outcome);
  d.job_id = job.job_id();
  d.state = job.state();
  d.job = job;
  d.result = ResultOf(job);
  // Check runs upstream: always for L4, for L3 when the PR's labels ask for
  // the repo's device.
  if (WantsCheckRuns(job, labels)) d.check_run = CheckRunFor(job);
  return d;
}

Decision Jobs::Accept(v1::JobState job, const v1::CallbackRequest& request, const LabelLookup& labels) {
  job.set_version(job.version() + 1);
  if (!request.sweep()) {
    v1::AcceptedCallback* a = job.add_accepted();
    a->set_token_id(request.token_id());
    a->set_body_sha256(request.body_sha256());
    a->set_token_expires_at_unix(request.token_expires_at_unix());
    tokens_[request.token_id()] = UsedToken{job.job_id(), request.body_sha256(), request.token_expires_at_unix()};
    *job.mutable_last() = request;
  }
  std::string id = job.job_id();
  decided_.erase(KeyOf(id));
  auto& stored = jobs_[id] = std::move(job);
  return Effects(stored, labels, "accepted");
}

absl::StatusOr<Decision> Jobs::Apply(const v1::CallbackRequest& req, int64_t now_ms, const LabelLookup& labels) {
  if (req.sweep()) {
    // The sweeper's request names the job in delivery/repo/run/attempt/job.
    std::string id = JobId(req);
    auto it = jobs_.find(id);
    // This time-out decided already: its batch failed after the decision
    // (records not acked) and comes again. A sweep has no token to be
    // replayed by, so its records are made again here, the same ones (same
    // version, same time), else the job would stay in progress downstream.
    if (it != jobs_.end() && it->second.state() == kCompleted && it->second.timed_out_by_sweeper()) {
      return Effects(it->second, labels, "replayed");
    }
    if (it == jobs_.end() || it->second.state() != kInProgress) {
      Decision d;
      d.outcome = "no_op";
      d.job_id = id;
      d.state = it != jobs_.end() ? it->second.state() : decided_.count(KeyOf(id)) ? kCompleted : "";
      return d;
    }
    v1::JobState job = it->second;
    job.set_state(kCompleted);
    job.set_conclusion("timed_out");
    job.set_completed_at_unix_ms(now_ms);
    job.set_timed_out_by_sweeper(true);
    return Accept(std::move(job), req, labels);
  }

  const std::string id = JobId(req);
  auto it = jobs_.find(id);
  const v1::JobState* existing = it == jobs_.end() ? nullptr : &it->second;
  // A decided job kept compact: what refusals need is in its compact form;
  // a replay reads its whole state back.
  const JobKey key = KeyOf(id);
  auto decided = existing ? decided_.end() : decided_.find(key);
  const bool compact = decided != decided_.end();
  const std::string state = existing ? existing->state() : compact ? kCompleted : "";

  // A token that carried an accepted callback: the same callback again is a
  // retry whose answer was lost; anything else is a replayed token.
  if (auto used = tokens_.find(req.token_id()); used != tokens_.end()) {
    if (used->second.job_id == id && used->second.body_sha256 == req.body_sha256() && (existing || compact)) {
      if (existing) return Effects(*existing, labels, "replayed");
      RELAY_ASSIGN_OR_RETURN(v1::JobState whole, Whole(key, decided->second));
      return Effects(whole, labels, "replayed");
    }
    return Refuse(401, "this OIDC token already carried another accepted callback; mint a new one per callback", id,
                  state);
  }

  const v1::WorkflowReport& wf = req.workflow();
  const bool self_report = req.event_type() == "nightly" || req.event_type() == "periodic";
  if (wf.status() == kInProgress) {
    if (existing || compact) {
      return Refuse(409,
                    state == kInProgress ? "duplicate in_progress: the job is already in progress"
                                         : "in_progress after completed: the job cannot go backwards",
                    id, state);
    }
    v1::JobState job = NewJob(id, req, kInProgress);
    job.set_in_progress_at_unix_ms(req.received_at_unix_ms());
    const v1::DispatchFact* fact = FindDispatch(req.repo(), req.delivery_id());
    if (fact) SetDispatch(job, *fact);
    if (!fact && !req.relay_token_verified()) {
      return Refuse(404, "no dispatch of delivery " + req.delivery_id() + " to " + req.repo() + " is known", id, "");
    }
    // A re-run attempt is its own job: the dispatch was long before it
    // was queued, so it has no queue time.
    bool first_attempt = wf.run_attempt() == "1";
    if (fact) {
      job.set_dispatched_at_source("relay.dispatches");
      if (first_attempt) job.set_dispatched_at_unix_ms(fact->dispatched_at_unix_ms());
    } else {
      // The relay token proves the dispatch (the relay signed it for this
      // delivery and repo, and only a dispatch GitHub accepted delivers
      // it); its record has not reached this partition yet.
      job.set_dispatched_at_source("relay_token");
      if (first_attempt) job.set_dispatched_at_unix_ms(req.relay_token_issued_at_unix() * 1000);
    }
    return Accept(std::move(job), req, labels);
  }

  // completed
  if (self_report) {
    if (existing || compact) {
      return Refuse(409, "duplicate completed: this " + req.event_type() + " job already reported", id, state);
    }
    auto seen = shas_.find({Lower(req.repo()), Lower(req.delivery_id())});
    if (seen == shas_.end()) {
      return Refuse(404, "upstream commit " + req.delivery_id() + " was never dispatched to " + req.repo(), id, "");
    }
    v1::JobState job = NewJob(id, req, kCompleted);
    job.set_conclusion(wf.conclusion());
    job.set_dispatched_at_source("none");
    job.set_upstream_repo(seen->second.upstream_repo);
    job.set_head_sha(Lower(req.delivery_id()));
    job.set_event(req.event_type());
    job.set_completed_at_unix_ms(req.received_at_unix_ms());
    return Accept(std::move(job), req, labels);
  }
  if (compact) {
    return Refuse(409, std::string("duplicate completed: the job already completed (") +
                           kConclusions[std::min(decided->second.conclusion, kUnknownConclusion)] + ")",
                  id, state);
  }
  if (!existing) {
    if (!FindDispatch(req.repo(), req.delivery_id()) && !req.relay_token_verified()) {
      return Refuse(404, "no dispatch of delivery " + req.delivery_id() + " to " + req.repo() + " is known", id, "");
    }
    return Refuse(409, "completed without in_progress: report in_progress first", id, "");
  }
  if (existing->state() == kCompleted) {
    return Refuse(409, "duplicate completed: the job already completed (" + existing->conclusion() + ")", id, state);
  }
  v1::JobState job = *existing;
  // The dispatch record may have come since in_progress (it was then taken
  // on the relay token's word): its facts, and its time for the queue time
  // (the token's is when it was minted, before the dispatch call). Not as
  // dispatched_at: stats partitions a job's rows by that time's month, and a
  // version in another partition would never replace the in_progress row.
  const bool on_token = job.dispatched_at_source() == "relay_token";
  if (job.upstream_repo().empty() || on_token) {
    if (const v1::DispatchFact* fact = FindDispatch(req.repo(), req.delivery_id())) {
      SetDispatch(job, *fact);
      if (on_token) {
        job.set_dispatched_at_source("relay.dispatches");
        if (job.dispatched_at_unix_ms() > 0) job.set_queued_from_unix_ms(fact->dispatched_at_unix_ms());
      }
    }
  }
  job.set_state(kCompleted);
  job.set_conclusion(wf.conclusion());
  job.set_completed_at_unix_ms(std::max(req.received_at_unix_ms(), job.in_progress_at_unix_ms()));
  return Accept(std::move(job), req, labels);
}

absl::StatusOr<std::vector<v1::GitHubRequest>> Jobs::CheckRunsForPullRequest(const std::string& upstream_repo,
                                                                             int64_t pr_number,
                                                                             const LabelLookup& labels) const {
  std::vector<v1::GitHubRequest> out;
  std::string upstream = Lower(upstream_repo);
  auto add = [&](const v1::JobState& job) {
    if (job.pr_number() != pr_number || Lower(job.upstream_repo()) != upstream) return;
    if (!WantsCheckRuns(job, labels)) return;
    if (auto req = CheckRunFor(job)) out.push_back(std::move(*req));
  };
  for (const auto& [id, job] : jobs_) add(job);
  // Decided jobs of the PR (by the key of it; a collision is weeded out by
  // the whole state): read back, then the same rule.
  uint32_t pr = PrKey(upstream_repo, pr_number);
  for (const auto& [key, d] : decided_) {
    if (pr == 0 || d.pr_key != pr) continue;
    RELAY_ASSIGN_OR_RETURN(v1::JobState job, Whole(key, d));
    add(job);
  }
  return out;
}

std::vector<std::string> Jobs::InProgressSince(int64_t cutoff_ms) const {
  std::vector<std::string> out;
  for (const auto& [id, job] : jobs_) {
    if (job.state() == kInProgress && job.in_progress_at_unix_ms() < cutoff_ms) out.push_back(id);
  }
  std::sort(out.begin(), out.end());  // the sweep in a stable order
  return out;
}

void Jobs::Prune(int64_t cutoff_ms, int64_t now_unix) {
  for (auto it = dispatches_.begin(); it != dispatches_.end();) {
    it = it->second.dispatched_at_unix_ms() < cutoff_ms ? dispatches_.erase(it) : std::next(it);
  }
  for (auto it = shas_.begin(); it != shas_.end();) {
    it = it->second.at_ms < cutoff_ms ? shas_.erase(it) : std::next(it);
  }
  // A token verifies until its exp plus the verifier's skew (60 s); keep
  // it well past that, instances' clocks may differ a little.
  absl::erase_if(tokens_, [&](const auto& kv) { return kv.second.expires_at + kTokenGraceSeconds < now_unix; });
  // Jobs leave with the same history (collector.state's retention is
  // as long): a late duplicate within it is still refused.
  absl::erase_if(jobs_, [&](const auto& kv) {
    return std::max(kv.second.in_progress_at_unix_ms(), kv.second.completed_at_unix_ms()) < cutoff_ms;
  });
  // A hash table keeps its slots when emptied: after a burst, give back
  // what the jobs and tokens left (their nodes are freed already).
  if (tokens_.size() < tokens_.bucket_count() / 4) tokens_.rehash(0);
  if (jobs_.size() < jobs_.bucket_count() / 4) jobs_.rehash(0);
  absl::erase_if(decided_, [&](const auto& kv) { return static_cast<int64_t>(kv.second.completed_s) * 1000 < cutoff_ms; });
}

}  // namespace relay::collector
