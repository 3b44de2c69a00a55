#include "relay/lifecycle/controller.h"

#include <openssl/sha.h>

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "relay/base/log.h"
#include "relay/base/random.h"
#include "relay/base/status.h"
#include "relay/lifecycle/cluster_state.h"

namespace relay::lifecycle {
namespace {

using namespace std::chrono_literals;

// A stable id for an idempotent request: the same team and request id give
// the same cluster or job.
std::string DerivedId(const std::string& prefix, const std::string& scope, const std::string& request_id) {
  std::string in = scope + '\0' + request_id;
  unsigned char d[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(in.data()), in.size(), d);
  return prefix + absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(d), 8));
}

bool ValidName(const std::string& s, size_t max) {
  if (s.empty() || s.size() > max) return false;
  return std::all_of(s.begin(), s.end(), [](char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-'; });
}

absl::Status ValidateSpec(const v1::ClusterSpec& spec, const ControllerOptions& o) {
  auto bad = [](const std::string& why) { return absl::InvalidArgumentError(why); };
  if (spec.kind() != "command" && spec.kind() != "ray") return bad("spec.kind is command or ray, not '" + spec.kind() + "'");
  if (spec.node_groups().empty() || spec.node_groups_size() > 16) return bad("a cluster has 1 to 16 node groups");
  std::set<std::string> names;
  int heads = 0;
  for (const auto& g : spec.node_groups()) {
    if (!ValidName(g.name(), 32)) return bad("node group name '" + g.name() + "' is not [a-z0-9-]{1,32}");
    if (!names.insert(g.name()).second) return bad("node group " + g.name() + " is named twice");
    if (g.count() < 0 || g.count() > o.max_nodes_per_group) {
      return bad(absl::StrCat("node group ", g.name(), ": count ", g.count(), " is outside 0..", o.max_nodes_per_group));
    }
    if (spec.kind() == "command") {
      if (g.command().empty() || g.command(0).empty()) return bad("node group " + g.name() + " needs a command");
      if (!g.ray_role().empty()) return bad("node group " + g.name() + ": ray_role is for kind ray");
    } else {
      if (g.ray_role() != "head" && g.ray_role() != "worker") return bad("node group " + g.name() + ": ray_role is head or worker");
      if (!g.command().empty()) return bad("node group " + g.name() + ": a Ray node runs Ray, not a command");
      if (g.ray_role() == "head") {
        ++heads;
        if (g.count() != 1) return bad("the Ray head group has exactly one node");
      }
    }
    if (g.resources().cpus() < 0 || g.resources().memory_mb() < 0 || g.resources().gpus() < 0) {
      return bad("node group " + g.name() + ": negative resources");
    }
  }
  if (spec.kind() == "ray" && heads != 1) return bad("a Ray cluster has exactly one head group");
  if (spec.idle_ttl_seconds() < 0) return bad("idle_ttl_seconds is negative");
  if (spec.max_lifetime_seconds() < 0 || spec.max_lifetime_seconds() > o.max_lifetime.count()) {
    return bad(absl::StrCat("max_lifetime_seconds is outside 0..", o.max_lifetime.count()));
  }
  if (spec.labels_size() > 32) return bad("at most 32 labels");
  for (const auto& [k, v] : spec.labels()) {
    if (k.empty() || k.size() > 63 || v.size() > 253) return bad("label " + k + ": keys are 1..63 characters, values up to 253");
  }
  return absl::OkStatus();
}

bool Visible(const auth::Caller& caller, const v1::Cluster& c) { return caller.admin || c.spec().team() == caller.team; }

}  // namespace

Controller::Controller(ControllerOptions options, NodeProvider* provider, kafka::TopicReader* reader,
                       const Clock* clock, prometheus::Registry* metrics)
    : o_(std::move(options)),
      provider_(provider),
      reader_(reader),
      clock_(clock),
      by_state_(prometheus::BuildGauge().Name("relay_lifecycle_clusters").Help("Clusters by state (the leader's view)").Register(*metrics)),
      reconcile_seconds_(prometheus::BuildHistogram()
                             .Name("relay_lifecycle_reconcile_seconds")
                             .Help("Duration of one reconcile pass over every cluster")
                             .Register(*metrics)
                             .Add({}, prometheus::Histogram::BucketBoundaries{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5})),
      provider_errors_(prometheus::BuildCounter()
                           .Name("relay_lifecycle_provider_errors_total")
                           .Help("Failed provider calls, by operation")
                           .Register(*metrics)),
      writes_failed_(prometheus::BuildCounter()
                         .Name("relay_lifecycle_state_writes_failed_total")
                         .Help("State records Kafka did not take (each makes the leader reload its state)")
                         .Register(*metrics)
                         .Add({})),
      orphans_removed_(prometheus::BuildCounter()
                           .Name("relay_lifecycle_orphans_removed_total")
                           .Help("Processes or objects the orphan sweep removed")
                           .Register(*metrics)
                           .Add({})),
      leader_(prometheus::BuildGauge()
                  .Name("relay_lifecycle_leader")
                  .Help("1 while this instance leads (reconciles and answers), 0 on standby")
                  .Register(*metrics)
                  .Add({})),
      epoch_gauge_(prometheus::BuildGauge()
                       .Name("relay_lifecycle_epoch")
                       .Help("The leader epoch this instance last led with (its claim's offset)")
                       .Register(*metrics)
                       .Add({})) {}

Controller::~Controller() { StepDown(); }

// ---------------------------------------------------------------- leadership

absl::Status Controller::TakeOver(int64_t epoch, kafka::Producer* writer) {
  std::lock_guard act(act_mu_);
  if (leading_) return absl::OkStatus();
  producer_ = writer;
  fenced_ = false;
  RELAY_RETURN_IF_ERROR(provider_->Acquire());
  if (auto st = Load(epoch); !st.ok()) {
    provider_->Release();
    return st;
  }
  Adopt();
  leading_ = true;
  leader_.Set(1);
  epoch_gauge_.Set(static_cast<double>(epoch));
  stop_ = false;
  last_sweep_ = clock_->Now();
  if (o_.background) loop_ = std::thread([this] { Loop(); });
  log::Info("leading", {{"epoch", epoch}, {"clusters", static_cast<int64_t>(clusters_.size())}});
  return absl::OkStatus();
}

void Controller::StepDown() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    changed_.notify_all();
  }
  if (loop_.joinable()) loop_.join();
  std::lock_guard act(act_mu_);
  if (!leading_) return;
  leading_ = false;
  leader_.Set(0);
  provider_->Release();
  {
    // Records still in the outbox were never sent: they go with the
    // leadership (the next leader rebuilds from Kafka); whoever waits for
    // one is answered.
    std::lock_guard send(send_mu_);
    std::vector<std::pair<kafka::Record, kafka::DeliveryCallback>> left;
    {
      std::lock_guard lock(mu_);
      left.swap(outbox_);
    }
    producer_ = nullptr;
    for (auto& [record, done] : left) std::move(done)(absl::UnavailableError("stepped down before it was sent"));
  }
  log::Info("stepped down", {{"epoch", epoch_.load()}});
}

absl::Status Controller::Load(int64_t epoch) {
  std::map<std::string, v1::ClusterRecord> latest;
  auto partitions = reader_->Partitions(o_.clusters_topic);
  if (!partitions.ok()) return partitions.status();
  std::vector<int32_t> all;
  for (int32_t p = 0; p < *partitions; ++p) all.push_back(p);
  int64_t records = 0, stale = 0;
  auto read = reader_->ReadToEnd(o_.clusters_topic, all, [&](const kafka::ConsumedRecord& r) -> absl::Status {
    ++records;
    if (r.value.empty()) {  // a tombstone: the cluster's history was dropped
      latest.erase(r.key);
      return absl::OkStatus();
    }
    v1::ClusterRecord rec;
    if (!rec.ParseFromString(r.value) || rec.cluster().id() != r.key) {
      log::Warn("unreadable state record skipped", {{"key", r.key}, {"offset", r.offset}});
      return absl::OkStatus();
    }
    auto it = latest.find(r.key);
    // Fencing: a record of a lower epoch than one already seen for this
    // key was written by a deposed leader after its successor took over.
    if (it != latest.end() && rec.leader_epoch() < it->second.leader_epoch()) {
      ++stale;
      return absl::OkStatus();
    }
    latest[r.key] = std::move(rec);
    return absl::OkStatus();
  });
  if (!read.ok()) return read.status();
  std::lock_guard lock(mu_);
  clusters_.clear();
  pending_.clear();
  cancel_sent_.clear();
  for (auto& [id, rec] : latest) clusters_[id] = std::move(*rec.mutable_cluster());
  epoch_ = epoch;
  reload_needed_ = false;
  log::Info("state rebuilt from Kafka", {{"topic", o_.clusters_topic}, {"records", records},
                                         {"clusters", static_cast<int64_t>(clusters_.size())}, {"fenced", stale}});
  return absl::OkStatus();
}

void Controller::Adopt() {
  auto inventory = provider_->Inventory();
  if (!inventory.ok()) {
    provider_errors_.Add({{"op", "inventory"}}).Increment();
    log::Warn("inventory failed at takeover; the first sweep retries", {{"error", std::string(inventory.status().message())}});
    return;
  }
  std::unique_lock lock(mu_);
  int64_t adopted = 0;
  for (const Owned& o : *inventory) {
    auto it = clusters_.find(o.cluster_id);
    if (it == clusters_.end() || o.pid != o.sid) continue;  // session leaders only
    v1::Cluster& c = it->second;
    for (auto& n : *c.mutable_nodes()) {
      if (!o.node_id.empty() && n.id() == o.node_id && NodeLive(n) && (n.pid() != o.pid || n.start_ticks() != o.start_ticks)) {
        // Started by a leader that died before recording it.
        n.set_pid(o.pid);
        n.set_start_ticks(o.start_ticks);
        n.set_state("RUNNING");
        if (n.started_at_ms() == 0) n.set_started_at_ms(clock_->UnixMillis());
        ++adopted;
        PersistLocked(c, {});
      }
    }
    for (auto& j : *c.mutable_jobs()) {
      if (!o.job_id.empty() && j.id() == o.job_id && JobActive(j) && j.pid() != o.pid) {
        j.set_pid(o.pid);
        j.set_start_ticks(o.start_ticks);
        j.set_state("RUNNING");
        ++adopted;
        PersistLocked(c, {});
      }
    }
  }
  if (adopted) log::Info("adopted processes started before the takeover", {{"processes", adopted}});
  lock.unlock();
  SendOutbox();
}

// ---------------------------------------------------------------- persistence

v1::ClusterEvent Controller::Event(const v1::Cluster& c, const std::string& kind, const std::string& state,
                                   const std::string& previous, const std::string& reason) const {
  v1::ClusterEvent e;
  e.set_cluster_id(c.id());
  e.set_team(c.spec().team());
  e.set_kind(kind);
  e.set_state(state);
  e.set_previous_state(previous);
  e.set_reason(reason);
  e.set_at_unix_ms(clock_->UnixMillis());
  e.set_provider(c.provider());
  e.set_leader_epoch(epoch_.load());
  int nodes = 0;
  for (const auto& n : c.nodes()) nodes += NodeLive(n) ? 1 : 0;
  e.set_nodes(nodes);
  return e;
}

void Controller::PersistLocked(v1::Cluster& c, std::vector<v1::ClusterEvent> events,
                               std::function<void(absl::Status)> done) {
  c.set_version(c.version() + 1);
  v1::ClusterRecord rec;
  *rec.mutable_cluster() = c;
  rec.set_leader_epoch(epoch_.load());
  kafka::Record r = kafka::MessageRecord(o_.clusters_topic, c.id(), rec);
  ++pending_[c.id()].writes;
  std::string id = c.id();
  outbox_.emplace_back(std::move(r), [this, id, done = std::move(done)](absl::Status st) mutable {
    {
      std::lock_guard lock(mu_);
      if (--pending_[id].writes <= 0) pending_.erase(id);
      if (!st.ok()) {
        // Memory now says more than Kafka: rebuild from Kafka before acting
        // again (the caller was told the change may not have happened).
        reload_needed_ = true;
        last_error_ = "state write failed: " + std::string(st.message());
        writes_failed_.Increment();
        if (kafka::IsFenced(st) && !fenced_.exchange(true)) {
          // A newer leader exists: nothing more may be done from here.
          log::Error("fenced: a newer leader took over; this instance stops acting",
                     {{"epoch", epoch_.load()}, {"error", std::string(st.message())}});
          stop_ = true;
          last_error_ = "fenced by a newer leader: " + std::string(st.message());
        }
      }
      wake_ = true;
      changed_.notify_all();
    }
    if (done) done(st);
  });
  // Events: ids are stable (cluster, version, index), so an event re-sent
  // after a takeover replaces itself downstream instead of counting twice.
  int i = 0;
  for (auto& e : events) {
    e.set_event_id(absl::StrCat(c.id(), ":", c.version(), ":", i++));
    outbox_.emplace_back(kafka::MessageRecord(o_.events_topic, c.id(), e), [](absl::Status st) {
      if (!st.ok()) log::Warn("cluster event not written", {{"error", std::string(st.message())}});
    });
  }
  changed_.notify_all();
}

void Controller::SendOutbox() {
  // One sender at a time, in the order records were made: a cluster's
  // records reach Kafka in version order. mu_ is not held while sending (a
  // producer may answer a Send at once, and the answer takes mu_).
  std::lock_guard send(send_mu_);
  std::vector<std::pair<kafka::Record, kafka::DeliveryCallback>> batch;
  {
    std::lock_guard lock(mu_);
    batch.swap(outbox_);
  }
  for (auto& [record, done] : batch) {
    if (producer_) {
      producer_->Send(std::move(record), std::move(done));
    } else {
      std::move(done)(absl::UnavailableError("not leading: not sent"));
    }
  }
}

absl::Status Controller::PersistAndWait(std::unique_lock<std::mutex>& lock, v1::Cluster& c,
                                        std::vector<v1::ClusterEvent> events) {
  kafka::Ack ack;
  PersistLocked(c, std::move(events), ack.Callback());
  lock.unlock();
  SendOutbox();
  absl::Status st = ack.Wait(o_.write_timeout).status();
  lock.lock();
  if (!st.ok()) return absl::UnavailableError("not recorded (" + std::string(st.message()) + "); retry with the same request_id");
  return absl::OkStatus();
}

absl::Status Controller::CheckLeading() const {
  if (!leading_) return absl::UnavailableError("standby: this instance does not lead; retry (the leader answers)");
  if (fenced_) return absl::UnavailableError("fenced: a newer leader took over; retry (the leader answers)");
  if (reload_needed_) return absl::UnavailableError("the leader is rebuilding its state after a failed write; retry");
  return absl::OkStatus();
}

absl::StatusOr<v1::Cluster*> Controller::Find(const auth::Caller& caller, const std::string& id) {
  auto it = clusters_.find(id);
  // Another team's cluster is not found, exactly as a missing one.
  if (it == clusters_.end() || !Visible(caller, it->second)) return absl::NotFoundError("no cluster " + id);
  return &it->second;
}

v1::Cluster Controller::Public(const v1::Cluster& c) {
  v1::Cluster out = c;
  out.clear_secrets();
  return out;
}

// ---------------------------------------------------------------- API

absl::StatusOr<v1::Cluster> Controller::Create(const auth::Caller& caller, const v1::CreateClusterRequest& request) {
  std::unique_lock lock(mu_);
  RELAY_RETURN_IF_ERROR(CheckLeading());
  v1::ClusterSpec spec = request.spec();
  if (spec.team().empty()) spec.set_team(caller.team);
  if (spec.team() != caller.team && !caller.admin) {
    return absl::PermissionDeniedError("a caller of team " + caller.team + " cannot create clusters for team " + spec.team());
  }
  if (request.request_id().size() > 128) return absl::InvalidArgumentError("request_id is longer than 128 characters");
  RELAY_RETURN_IF_ERROR(ValidateSpec(spec, o_));
  RELAY_RETURN_IF_ERROR(provider_->Supports(spec));
  std::string id = request.request_id().empty() ? "c" + RandomHex(8) : DerivedId("c", spec.team(), request.request_id());
  if (auto it = clusters_.find(id); it != clusters_.end()) {
    // The retry of a request already taken (possibly unanswered).
    // Its first write may still be in flight: that write's outcome is the
    // answer.
    auto deadline = std::chrono::steady_clock::now() + o_.write_timeout;
    while (pending_.count(id) && changed_.wait_until(lock, deadline) != std::cv_status::timeout) {
    }
    RELAY_RETURN_IF_ERROR(CheckLeading());
    if (pending_.count(id) || !clusters_.count(id)) return absl::UnavailableError("the first request is still being recorded; retry");
    return Public(clusters_.at(id));
  }
  int live = 0;
  for (const auto& [_, c] : clusters_) live += (!Ended(c) && c.spec().team() == spec.team()) ? 1 : 0;
  if (live >= o_.max_clusters_per_team) {
    return absl::ResourceExhaustedError(absl::StrCat("team ", spec.team(), " has ", live, " clusters (the limit)"));
  }
  v1::Cluster c;
  c.set_id(id);
  *c.mutable_spec() = spec;
  c.set_state(kRequested);
  c.set_created_at_ms(clock_->UnixMillis());
  c.set_state_since_ms(c.created_at_ms());
  c.set_last_active_ms(c.created_at_ms());
  c.set_created_by(caller.name);
  c.set_request_id(request.request_id());
  c.set_provider(provider_->name());
  int64_t lifetime = spec.max_lifetime_seconds() > 0 ? spec.max_lifetime_seconds() : o_.max_lifetime.count();
  c.set_max_lifetime_ms(lifetime * 1000);
  v1::ClusterEvent req = Event(c, "request", kRequested, "", "CreateCluster");
  req.set_actor(caller.name);
  v1::ClusterEvent st = Event(c, "cluster", kRequested, "", "");
  v1::Cluster& stored = clusters_[id] = c;
  if (auto s = PersistAndWait(lock, stored, {req, st}); !s.ok()) return s;
  wake_ = true;
  changed_.notify_all();
  return Public(clusters_.at(id));
}

absl::StatusOr<v1::Cluster> Controller::Get(const auth::Caller& caller, const std::string& id) {
  std::lock_guard lock(mu_);
  RELAY_RETURN_IF_ERROR(CheckLeading());
  RELAY_ASSIGN_OR_RETURN(v1::Cluster * c, Find(caller, id));
  return Public(*c);
}

absl::StatusOr<std::vector<v1::Cluster>> Controller::List(const auth::Caller& caller,
                                                          const v1::ListClustersRequest& request) {
  std::lock_guard lock(mu_);
  RELAY_RETURN_IF_ERROR(CheckLeading());
  if (!request.team().empty() && request.team() != caller.team && !caller.admin) {
    return absl::PermissionDeniedError("a caller of team " + caller.team + " cannot list team " + request.team());
  }
  std::string team = request.team().empty() && !caller.admin ? caller.team : request.team();
  std::vector<v1::Cluster> out;
  for (const auto& [id, c] : clusters_) {
    if (!team.empty() && c.spec().team() != team) continue;
    if (!request.state().empty() && c.state() != request.state()) continue;
    if (request.state().empty() && Ended(c) && !request.include_ended()) continue;
    bool match = true;
    for (const auto& [k, v] : request.labels()) {
      auto l = c.spec().labels().find(k);
      match = match && l != c.spec().labels().end() && l->second == v;
    }
    if (match) out.push_back(Public(c));
  }
  return out;
}

absl::StatusOr<v1::Cluster> Controller::Delete(const auth::Caller& caller, const std::string& id) {
  std::unique_lock lock(mu_);
  RELAY_RETURN_IF_ERROR(CheckLeading());
  RELAY_ASSIGN_OR_RETURN(v1::Cluster * c, Find(caller, id));
  if (c->delete_requested() || Ended(*c)) return Public(*c);
  c->set_delete_requested(true);
  v1::ClusterEvent req = Event(*c, "request", c->state(), "", "DeleteCluster");
  req.set_actor(caller.name);
  RELAY_RETURN_IF_ERROR(PersistAndWait(lock, *c, {req}));
  wake_ = true;
  changed_.notify_all();
  RELAY_ASSIGN_OR_RETURN(c, Find(caller, id));
  return Public(*c);
}

absl::StatusOr<v1::Cluster> Controller::Scale(const auth::Caller& caller, const v1::ScaleClusterRequest& request) {
  std::unique_lock lock(mu_);
  RELAY_RETURN_IF_ERROR(CheckLeading());
  RELAY_ASSIGN_OR_RETURN(v1::Cluster * c, Find(caller, request.id()));
  if (c->delete_requested() || Ended(*c) || c->state() == kTerminating) {
    return absl::FailedPreconditionError("cluster " + c->id() + " is " + c->state() + ": it cannot be scaled");
  }
  v1::NodeGroup* group = nullptr;
  for (auto& g : *c->mutable_spec()->mutable_node_groups()) {
    if (g.name() == request.node_group()) group = &g;
  }
  if (!group) return absl::InvalidArgumentError("cluster " + c->id() + " has no node group " + request.node_group());
  if (request.count() < 0 || request.count() > o_.max_nodes_per_group) {
    return absl::InvalidArgumentError(absl::StrCat("count is outside 0..", o_.max_nodes_per_group));
  }
  if (group->ray_role() == "head" && request.count() != 1) return absl::InvalidArgumentError("a Ray head group has one node");
  if (group->count() == request.count()) return Public(*c);
  group->set_count(request.count());
  v1::ClusterEvent req = Event(*c, "request", c->state(), "", absl::StrCat("ScaleCluster ", request.node_group(), "=", request.count()));
  req.set_actor(caller.name);
  req.set_node_group(request.node_group());
  RELAY_RETURN_IF_ERROR(PersistAndWait(lock, *c, {req}));
  wake_ = true;
  changed_.notify_all();
  RELAY_ASSIGN_OR_RETURN(c, Find(caller, request.id()));
  return Public(*c);
}

absl::Status Controller::SetGroupCount(const std::string& cluster_id, const std::string& group, int count) {
  auth::Caller system{"relay-lifecycle-pools", "", true, "internal"};
  v1::ScaleClusterRequest r;
  r.set_id(cluster_id);
  r.set_node_group(group);
  r.set_count(count);
  return Scale(system, r).status();
}

absl::StatusOr<v1::Job> Controller::SubmitJob(const auth::Caller& caller, const v1::SubmitJobRequest& request) {
  std::unique_lock lock(mu_);
  RELAY_RETURN_IF_ERROR(CheckLeading());
  RELAY_ASSIGN_OR_RETURN(v1::Cluster * c, Find(caller, request.cluster_id()));
  if (request.entrypoint().empty() || request.entrypoint().size() > 64 * 1024) {
    return absl::InvalidArgumentError("entrypoint is a shell command of 1 to 65536 bytes");
  }
  if (request.request_id().size() > 128) return absl::InvalidArgumentError("request_id is longer than 128 characters");
  std::string job_id = request.request_id().empty() ? "j" + RandomHex(8) : DerivedId("j", c->id(), request.request_id());
  for (const auto& j : c->jobs()) {
    if (j.id() == job_id) return j;  // a retry
  }
  if (c->delete_requested() || Ended(*c) || c->state() == kTerminating) {
    return absl::FailedPreconditionError("cluster " + c->id() + " is " + c->state() + ": it takes no jobs");
  }
  int active = 0;
  for (const auto& j : c->jobs()) active += JobActive(j) ? 1 : 0;
  if (c->jobs_size() >= o_.max_jobs_per_cluster) {
    // Keep the newest history: drop the oldest ended job.
    auto* jobs = c->mutable_jobs();
    auto oldest = std::find_if(jobs->begin(), jobs->end(), [](const v1::Job& j) { return !JobActive(j); });
    if (oldest == jobs->end()) return absl::ResourceExhaustedError(absl::StrCat(active, " jobs are active on the cluster"));
    jobs->erase(oldest);
  }
  v1::Job* j = c->add_jobs();
  j->set_id(job_id);
  j->set_cluster_id(c->id());
  j->set_team(c->spec().team());
  j->set_entrypoint(request.entrypoint());
  j->set_state("PENDING");
  j->set_exit_code(-1);
  j->set_submitted_at_ms(clock_->UnixMillis());
  j->set_request_id(request.request_id());
  j->set_submitted_by(caller.name);
  c->set_last_active_ms(clock_->UnixMillis());
  v1::ClusterEvent e = Event(*c, "job", "PENDING", "", "SubmitJob");
  e.set_job_id(job_id);
  e.set_actor(caller.name);
  std::string cid = c->id();
  RELAY_RETURN_IF_ERROR(PersistAndWait(lock, *c, {e}));
  wake_ = true;
  changed_.notify_all();
  RELAY_ASSIGN_OR_RETURN(c, Find(caller, cid));
  for (const auto& jj : c->jobs()) {
    if (jj.id() == job_id) return jj;
  }
  return absl::UnavailableError("the job was recorded but the cluster changed meanwhile; GetJob " + job_id);
}

absl::StatusOr<v1::Job> Controller::GetJob(const auth::Caller& caller, const std::string& cluster, const std::string& job) {
  std::lock_guard lock(mu_);
  RELAY_RETURN_IF_ERROR(CheckLeading());
  RELAY_ASSIGN_OR_RETURN(v1::Cluster * c, Find(caller, cluster));
  for (const auto& j : c->jobs()) {
    if (j.id() == job) return j;
  }
  return absl::NotFoundError("no job " + job + " on cluster " + cluster);
}

absl::StatusOr<std::vector<v1::Job>> Controller::ListJobs(const auth::Caller& caller, const std::string& cluster) {
  std::lock_guard lock(mu_);
  RELAY_RETURN_IF_ERROR(CheckLeading());
  RELAY_ASSIGN_OR_RETURN(v1::Cluster * c, Find(caller, cluster));
  return std::vector<v1::Job>(c->jobs().begin(), c->jobs().end());
}

absl::StatusOr<v1::Job> Controller::CancelJob(const auth::Caller& caller, const std::string& cluster, const std::string& job) {
  std::unique_lock lock(mu_);
  RELAY_RETURN_IF_ERROR(CheckLeading());
  RELAY_ASSIGN_OR_RETURN(v1::Cluster * c, Find(caller, cluster));
  v1::Job* found = nullptr;
  for (auto& j : *c->mutable_jobs()) {
    if (j.id() == job) found = &j;
  }
  if (!found) return absl::NotFoundError("no job " + job + " on cluster " + cluster);
  if (!JobActive(*found) || found->cancel_requested()) return *found;
  found->set_cancel_requested(true);
  v1::ClusterEvent e = Event(*c, "request", found->state(), "", "CancelJob");
  e.set_job_id(job);
  e.set_actor(caller.name);
  RELAY_RETURN_IF_ERROR(PersistAndWait(lock, *c, {e}));
  wake_ = true;
  changed_.notify_all();
  RELAY_ASSIGN_OR_RETURN(c, Find(caller, cluster));
  for (const auto& j : c->jobs()) {
    if (j.id() == job) return j;
  }
  return absl::NotFoundError("no job " + job + " on cluster " + cluster);
}

absl::StatusOr<std::optional<v1::Cluster>> Controller::WaitForChange(const auth::Caller& caller, const std::string& id,
                                                                     int64_t after_version,
                                                                     std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    RELAY_RETURN_IF_ERROR(CheckLeading());
    RELAY_ASSIGN_OR_RETURN(v1::Cluster * c, Find(caller, id));
    // Only acknowledged versions are shown.
    if (c->version() > after_version && !pending_.count(id)) return std::optional<v1::Cluster>(Public(*c));
    if (changed_.wait_until(lock, deadline) == std::cv_status::timeout) return std::optional<v1::Cluster>();
  }
}

void Controller::Note(const absl::Status& st, const char* op) {
  if (st.ok()) return;
  provider_errors_.Add({{"op", op}}).Increment();
  log::Warn("provider call failed", {{"op", op}, {"error", std::string(st.message())}});
}

std::map<std::string, int> Controller::CountByState() const {
  std::lock_guard lock(mu_);
  std::map<std::string, int> out;
  for (const auto& [_, c] : clusters_) ++out[c.state()];
  return out;
}

absl::Status Controller::Health() const {
  std::lock_guard lock(mu_);
  if (reload_needed_ || fenced_) return absl::UnavailableError(last_error_);
  return absl::OkStatus();
}

}  // namespace relay::lifecycle
