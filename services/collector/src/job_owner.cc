#include "relay/collector/job_owner.h"

#include <condition_variable>

#include "absl/strings/ascii.h"
#include "relay/base/log.h"
#include "relay/base/random.h"
#include "relay/base/status.h"
#include "relay/v1/dispatch.pb.h"

namespace relay::collector {

using namespace std::chrono_literals;

JobOwner::JobOwner(Parts parts, prometheus::Registry& metrics)
    : p_(std::move(parts)),
      sweeps_(prometheus::BuildCounter()
                  .Name("relay_collector_sweeps_total")
                  .Help("Zombie sweeps: jobs asked to time out (requested) and timed out (timed_out)")
                  .Register(metrics)),
      jobs_gauge_(prometheus::BuildGauge()
                      .Name("relay_collector_jobs")
                      .Help("Jobs held by the partitions this instance owns")
                      .Register(metrics)
                      .Add({})),
      decided_gauge_(prometheus::BuildGauge()
                         .Name("relay_collector_jobs_compact")
                         .Help("Of those, decided jobs held in their compact form (the rest whole)")
                         .Register(metrics)
                         .Add({})),
      label_facts_(prometheus::BuildCounter()
                       .Name("relay_collector_label_facts_total")
                       .Help("relay.pr_labels facts read, by result: applied (newer by event time than the PR's "
                             "last), older (an older event's fact: ignored)")
                       .Register(metrics)),
      state_reads_(prometheus::BuildCounter()
                       .Name("relay_collector_state_reads_total")
                       .Help("Decided jobs' whole states read back from collector.state (replays, late labels)")
                       .Register(metrics)
                       .Add({})),
      late_check_runs_(prometheus::BuildCounter()
                           .Name("relay_collector_late_label_check_runs_total")
                           .Help("Check runs a late label raised, by result: requested (acked on github.requests), "
                                 "retrying (not acked; sent again by the sweep), dropped (the retry list was full)")
                           .Register(metrics)) {
  for (const char* r : {"requested", "timed_out"}) sweeps_.Add({{"result", r}});
  for (const char* r : {"applied", "older"}) label_facts_.Add({{"result", r}});
  for (const char* r : {"requested", "retrying", "dropped"}) late_check_runs_.Add({{"result", r}});
}

void JobOwner::OnLabels(const kafka::ConsumedRecord& r) {
  v1::PullRequestLabels l;
  if (!l.ParseFromString(r.value)) return;
  // An older event's fact (a replay, a late redelivery) changes nothing and
  // raises nothing: the newest by event time stands.
  bool newer = labels_.Apply(l);
  label_facts_.Add({{"result", newer ? "applied" : "older"}}).Increment();
  if (!newer) return;
  // A label that arrives after the dispatch (during the run or after it)
  // still raises the check runs of the PR's jobs this instance owns.
  // Only once the labels read at start are behind us: at start, the jobs
  // got their check runs when they were decided.
  if (!labels_live_.load()) {
    if (!p_.labels_caught_up()) return;
    labels_live_ = true;
  }
  std::vector<std::shared_ptr<Partition>> parts;
  {
    std::lock_guard lock(parts_mu_);
    for (auto& [p, part] : parts_) parts.push_back(part);
  }
  LabelLookup lookup = [this](const std::string& repo, int64_t pr) { return Devices(repo, pr); };
  for (auto& part : parts) {
    std::vector<v1::GitHubRequest> writes;
    {
      std::lock_guard lock(part->mu);
      auto wanted = part->jobs.CheckRunsForPullRequest(l.upstream_repo(), l.number(), lookup);
      if (!wanted.ok()) {
        log::Warn("check runs for a late label not requested: decided jobs unreadable",
                  {{"pr", l.upstream_repo() + "#" + std::to_string(l.number())},
                   {"error", std::string(wanted.status().message())}});
        continue;
      }
      writes = std::move(*wanted);
    }
    for (auto& w : writes) SendLateCheckRun(std::move(w));
  }
}

void JobOwner::SendLateCheckRun(v1::GitHubRequest write) {
  kafka::Record record = kafka::MessageRecord(p_.settings->topics.github_requests, write.repo(), write, write.delivery_id());
  p_.producer->Send(std::move(record), [this, write = std::move(write)](absl::Status st) mutable {
    if (st.ok()) {
      late_check_runs_.Add({{"result", "requested"}}).Increment();
      return;
    }
    std::lock_guard lock(retry_mu_);
    if (late_check_runs_to_retry_.size() >= kMaxLateCheckRunRetries) {
      late_check_runs_.Add({{"result", "dropped"}}).Increment();
      log::Error("check run for a late label dropped: too many waiting to be sent again",
                 {{"id", write.id()}, {"error", std::string(st.message())}});
      return;
    }
    late_check_runs_.Add({{"result", "retrying"}}).Increment();
    log::Warn("check run for a late label not requested; sent again at the next sweep",
              {{"id", write.id()}, {"error", std::string(st.message())}});
    late_check_runs_to_retry_.push_back(std::move(write));
  });
}

std::set<std::string> JobOwner::Devices(const std::string& upstream_repo, int64_t pr) {
  return labels_.Devices(upstream_repo, pr);
}

absl::Status JobOwner::Assigned(const std::vector<kafka::TopicPartition>& tps) {
  int64_t now_unix = p_.clock->UnixMillis() / 1000;
  for (const auto& tp : tps) {
    if (tp.topic != p_.settings->topics.callbacks) continue;
    auto part = std::make_shared<Partition>(Fetcher(tp.partition));
    size_t restored = 0, dispatches = 0;
    auto state = p_.reader->ReadToEnd(p_.settings->topics.state, {tp.partition}, [&](const kafka::ConsumedRecord& r) {
      if (r.value.empty()) return absl::OkStatus();  // a tombstone
      v1::JobState job;
      if (!job.ParseFromString(r.value)) {
        log::Warn("unreadable job state skipped", {{"partition", tp.partition}, {"offset", r.offset}});
        return absl::OkStatus();
      }
      part->jobs.Restore(std::move(job), r.offset, now_unix);
      ++restored;
      return absl::OkStatus();
    });
    RELAY_RETURN_IF_ERROR(state.status());
    auto facts = p_.reader->ReadToEnd(p_.settings->topics.dispatches, {tp.partition}, [&](const kafka::ConsumedRecord& r) {
      v1::DispatchRecord d;
      if (d.ParseFromString(r.value)) {
        part->jobs.AddDispatch(d);
        ++dispatches;
      }
      return absl::OkStatus();
    });
    RELAY_RETURN_IF_ERROR(facts.status());
    log::Info("partition loaded", {{"partition", tp.partition},
                                   {"jobs", static_cast<int64_t>(part->jobs.jobs())},
                                   {"decided_compact", static_cast<int64_t>(part->jobs.decided())},
                                   {"dispatches", static_cast<int64_t>(dispatches)}});
    std::lock_guard lock(parts_mu_);
    parts_[tp.partition] = std::move(part);
  }
  UpdateJobsGauge();
  return absl::OkStatus();
}

// Reads a decided job's whole state back from collector.state, for the
// rare paths that need it (a replay, a late label's check runs). Any
// thread: the reader is its own, behind a lock.
Jobs::StateFetcher JobOwner::Fetcher(int32_t partition) {
  return [this, partition](int64_t offset) -> absl::StatusOr<v1::JobState> {
    std::lock_guard lock(fetch_mu_);
    state_reads_.Increment();
    RELAY_ASSIGN_OR_RETURN(kafka::ConsumedRecord r, p_.fetch_reader->ReadAt(p_.settings->topics.state, partition, offset));
    v1::JobState job;
    if (!job.ParseFromString(r.value)) {
      return absl::DataLossError("collector.state " + std::to_string(partition) + "@" + std::to_string(offset) +
                                 " is not a relay.v1.JobState");
    }
    return job;
  };
}

void JobOwner::Revoked(const std::vector<kafka::TopicPartition>& tps) {
  std::lock_guard lock(parts_mu_);
  for (const auto& tp : tps) {
    if (tp.topic == p_.settings->topics.callbacks) parts_.erase(tp.partition);
  }
}

std::shared_ptr<JobOwner::Partition> JobOwner::Part(int32_t p) {
  std::lock_guard lock(parts_mu_);
  auto it = parts_.find(p);
  return it == parts_.end() ? nullptr : it->second;
}

void JobOwner::UpdateJobsGauge() {
  size_t n = 0, decided = 0;
  std::lock_guard lock(parts_mu_);
  for (auto& [p, part] : parts_) {
    std::lock_guard plock(part->mu);
    n += part->jobs.jobs();
    decided += part->jobs.decided();
  }
  jobs_gauge_.Set(static_cast<double>(n));
  decided_gauge_.Set(static_cast<double>(decided));
}

absl::Status JobOwner::HandleBatch(kafka::Batch& batch) {
  // L3 check runs depend on the PR's labels: decide nothing before the
  // labels present at start are read (the batch comes again shortly).
  if (!p_.labels_caught_up()) return absl::UnavailableError("still reading " + p_.settings->topics.labels);
  std::vector<kafka::Record> effects;
  std::vector<StateWrite> stored;           // which of them are job states
  std::vector<kafka::Record> answers;       // for callers waiting at other instances
  std::vector<v1::CallbackDecision> local;  // for callers waiting here
  int64_t now_ms = p_.clock->UnixMillis();
  LabelLookup labels = [this](const std::string& repo, int64_t pr) { return Devices(repo, pr); };
  std::shared_ptr<Partition> part;  // of the record in hand; looked up when the partition changes
  for (size_t i = 0; i < batch.records().size(); ++i) {
    const kafka::ConsumedRecord& rec = batch.records()[i];
    if (i == 0 || rec.partition != batch.records()[i - 1].partition) part = Part(rec.partition);
    if (!part) return absl::UnavailableError("partition " + std::to_string(rec.partition) + " is not loaded");
    if (rec.topic == p_.settings->topics.dispatches) {
      v1::DispatchRecord d;
      if (!d.ParseFromString(rec.value)) {
        batch.Reject(i, "not a relay.v1.DispatchRecord");
        continue;
      }
      std::lock_guard lock(part->mu);
      part->jobs.AddDispatch(d);
      continue;
    }
    v1::CallbackRequest req;
    if (!req.ParseFromString(rec.value) || (!req.sweep() && req.request_id().empty())) {
      batch.Reject(i, "not a relay.v1.CallbackRequest");
      continue;
    }
    Decision d;
    {
      std::lock_guard lock(part->mu);
      auto decided = part->jobs.Apply(req, now_ms, labels);
      // A decided job's state could not be read back: the batch comes
      // again (nothing of it was made durable yet).
      if (!decided.ok()) return decided.status();
      d = std::move(*decided);
    }
    if (d.job) {
      stored.push_back(StateWrite{rec.partition, d.job_id, d.job->version(), effects.size()});
      effects.push_back(kafka::MessageRecord(p_.settings->topics.state, "j|" + d.job_id, *d.job, req.delivery_id(), rec.partition));
    }
    if (d.result) effects.push_back(kafka::MessageRecord(p_.settings->topics.results, d.job_id, *d.result, req.delivery_id()));
    if (d.check_run) {
      effects.push_back(kafka::MessageRecord(p_.settings->topics.github_requests, d.check_run->repo(), *d.check_run, req.delivery_id()));
    }
    if (req.sweep()) {
      if (d.outcome == "accepted") sweeps_.Add({{"result", "timed_out"}}).Increment();
      continue;
    }
    v1::CallbackDecision answer;
    answer.set_request_id(req.request_id());
    answer.set_http_status(d.http_status);
    answer.set_outcome(d.outcome);
    answer.set_reason(d.reason);
    answer.set_state(d.state);
    answer.set_job_id(d.job_id);
    if (d.outcome == "refused") {
      log::Info("callback refused by the state machine",
                {{"status", d.http_status}, {"reason", d.reason}, {"repo", req.repo()}, {"job", d.job_id}});
    }
    if (p_.is_waiting(req.request_id())) {
      local.push_back(std::move(answer));  // its caller is on this instance: answered directly
    } else {
      answers.push_back(kafka::MessageRecord(p_.settings->topics.decisions, req.request_id(), answer, req.delivery_id()));
    }
  }
  // The state and its effects are durable before anyone hears the
  // decision; if any of them fails the batch comes again, and what was
  // accepted is then a replay that writes the same records again.
  RELAY_ASSIGN_OR_RETURN(std::vector<int64_t> offsets, SendAll(std::move(effects)));
  // Durable: decided jobs keep only their compact form from here on.
  for (const auto& w : stored) {
    if (auto owner = Part(w.partition)) {
      std::lock_guard lock(owner->mu);
      owner->jobs.Stored(w.job_id, w.version, offsets[w.index]);
    }
  }
  for (const auto& d : local) p_.answer(d);
  for (auto& a : answers) {
    p_.producer->Send(std::move(a), [](absl::Status st) {
      // A lost answer times the caller out (503); its retry is a replay.
      if (!st.ok()) log::Warn("decision not delivered", {{"error", std::string(st.message())}});
    });
  }
  return absl::OkStatus();
}

// Sends every record and waits for all acks; the offset each got.
absl::StatusOr<std::vector<int64_t>> JobOwner::SendAll(std::vector<kafka::Record> records) {
  if (records.empty()) return std::vector<int64_t>{};
  struct Acks {
    std::mutex mu;
    std::condition_variable cv;
    size_t left;
    absl::Status first = absl::OkStatus();
    std::vector<int64_t> offsets;
  };
  auto acks = std::make_shared<Acks>();
  acks->left = records.size();
  acks->offsets.assign(records.size(), -1);
  for (size_t i = 0; i < records.size(); ++i) {
    p_.producer->SendReported(std::move(records[i]), [acks, i](absl::Status st, int64_t offset) {
      std::lock_guard lock(acks->mu);
      if (!st.ok() && acks->first.ok()) acks->first = st;
      acks->offsets[i] = offset;
      if (--acks->left == 0) acks->cv.notify_all();
    });
  }
  std::unique_lock lock(acks->mu);
  // The producer calls back within its delivery timeout; the margin
  // covers a recreation.
  if (!acks->cv.wait_for(lock, p_.settings->kafka.delivery_timeout * 3 + 1s, [&] { return acks->left == 0; })) {
    return absl::UnavailableError("job state or results not acknowledged in time");
  }
  if (!acks->first.ok()) return acks->first;
  return acks->offsets;
}

// Jobs in progress past the zombie timeout are timed out through the
// same path as a callback, so their owner decides (once) in order with
// any late callback of theirs.
void JobOwner::Sweep() {
  std::vector<v1::GitHubRequest> again;
  {
    std::lock_guard lock(retry_mu_);
    again.swap(late_check_runs_to_retry_);
  }
  for (auto& w : again) SendLateCheckRun(std::move(w));
  int64_t now_ms = p_.clock->UnixMillis();
  auto now = std::chrono::steady_clock::now();
  std::vector<std::pair<int32_t, v1::CallbackRequest>> asks;
  {
    std::lock_guard lock(parts_mu_);
    for (auto& [p, part] : parts_) {
      std::lock_guard plock(part->mu);
      part->jobs.Prune(now_ms - p_.settings->history.count(), now_ms / 1000);
      std::vector<std::string> zombies = part->jobs.InProgressSince(now_ms - p_.settings->zombie_timeout.count());
      // Asked-for jobs that are no longer zombies (timed out, completed, pruned).
      std::set<std::string> still(zombies.begin(), zombies.end());
      for (auto it = part->sweep_asked.begin(); it != part->sweep_asked.end();) {
        it = still.count(it->first) ? std::next(it) : part->sweep_asked.erase(it);
      }
      for (const std::string& id : zombies) {
        auto asked = part->sweep_asked.find(id);
        if (asked != part->sweep_asked.end() && now - asked->second < 10min) continue;
        part->sweep_asked[id] = now;
        const v1::JobState* job = part->jobs.Find(id);
        v1::CallbackRequest req;
        req.set_sweep(true);
        req.set_request_id(RandomHex(16));
        req.set_received_at_unix_ms(now_ms);
        req.set_repo(job->repo());
        req.set_delivery_id(job->delivery_id());
        req.mutable_workflow()->set_run_id(job->run_id());
        req.mutable_workflow()->set_run_attempt(job->run_attempt());
        req.mutable_workflow()->set_job_name(job->job_name());
        asks.emplace_back(p, std::move(req));
      }
    }
  }
  for (auto& [p, req] : asks) {
    sweeps_.Add({{"result", "requested"}}).Increment();
    log::Info("zombie job to be timed out", {{"repo", req.repo()}, {"run_id", req.workflow().run_id()},
                                             {"job", req.workflow().job_name()}});
    std::string key = req.repo();
    p_.producer->Send(kafka::MessageRecord(p_.settings->topics.callbacks, std::move(key), req, req.delivery_id(), p),
                    [](absl::Status st) {
                      // Asked again at the next sweep after 10 minutes.
                      if (!st.ok()) log::Warn("sweep request not durable", {{"error", std::string(st.message())}});
                    });
  }
  UpdateJobsGauge();
}

}  // namespace relay::collector
