// The reconcile loop of the controller (controller.h): level-based, one
// pass over every cluster at a time. Each pass compares a cluster's record
// with what the provider reports, starts and stops nodes (a node is
// recorded STARTING, durably, before it is started), ends jobs, moves the
// cluster through its states, collects idle, expired and stuck clusters,
// accounts usage, and sweeps the host for orphans of this installation.
// Leadership, persistence and the API are in controller.cc.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "relay/base/log.h"
#include "relay/base/status.h"
#include "relay/lifecycle/cluster_state.h"
#include "relay/lifecycle/controller.h"

namespace relay::lifecycle {

using namespace std::chrono_literals;

void Controller::Loop() {
  while (true) {
    {
      std::unique_lock lock(mu_);
      changed_.wait_for(lock, o_.reconcile_interval, [this] { return stop_ || wake_; });
      if (stop_) return;
      wake_ = false;
    }
    bool reload;
    {
      std::lock_guard lock(mu_);
      reload = reload_needed_;
    }
    if (reload) {
      std::lock_guard act(act_mu_);
      // Wait for writes in flight, then read back what Kafka has.
      if (producer_) (void)producer_->Flush(o_.write_timeout);  // what is still in flight lands or fails first
      if (auto st = Load(epoch_.load()); !st.ok()) {
        log::Warn("state reload failed; retrying", {{"error", std::string(st.message())}});
        std::this_thread::sleep_for(500ms);
        continue;
      }
      Adopt();
    }
    ReconcileOnce();
    if (clock_->Now() - last_sweep_ >= o_.sweep_interval) {
      SweepOrphans();
      last_sweep_ = clock_->Now();
    }
  }
}

void Controller::EndJob(v1::Cluster& c, v1::Job& j, const std::string& state, const std::string& reason, int64_t now,
                        std::vector<v1::ClusterEvent>& events) {
  std::string previous = j.state();
  j.set_state(state);
  j.set_reason(reason);
  j.set_ended_at_ms(now);
  v1::ClusterEvent e = Event(c, "job", state, previous, reason);
  e.set_job_id(j.id());
  e.set_log_path(j.log_path());
  events.push_back(e);
}

void Controller::SetState(v1::Cluster& c, const std::string& state, const std::string& reason,
                          std::vector<v1::ClusterEvent>& events) {
  if (c.state() == state) return;
  std::string previous = c.state();
  c.set_state(state);
  c.set_reason(reason);
  c.set_state_since_ms(clock_->UnixMillis());
  events.push_back(Event(c, "cluster", state, previous, reason));
  log::Info("cluster state", {{"cluster", c.id()}, {"team", c.spec().team()}, {"from", previous}, {"to", state},
                              {"reason", reason}});
}

void Controller::AddUsage(v1::Cluster& c, int64_t until_ms, std::vector<v1::ClusterEvent>& events) {
  int64_t from = c.usage_until_ms() > 0 ? c.usage_until_ms() : c.created_at_ms();
  if (until_ms <= from) return;
  std::map<std::string, int64_t> node_ms;
  for (const auto& g : c.spec().node_groups()) node_ms[g.name()] = 0;
  for (const auto& n : c.nodes()) {
    if (n.started_at_ms() == 0) continue;
    int64_t end = n.stopped_at_ms() > 0 ? n.stopped_at_ms() : until_ms;
    node_ms[n.group()] += Overlap(from, until_ms, n.started_at_ms(), end);
  }
  v1::ClusterEvent whole = Event(c, "usage", c.state(), "", "");
  whole.set_cluster_seconds((until_ms - from) / 1000.0);
  whole.set_at_unix_ms(until_ms);
  events.push_back(whole);
  for (const auto& [group, ms] : node_ms) {
    v1::ClusterEvent e = Event(c, "usage", c.state(), "", "");
    e.set_node_group(group);
    e.set_node_seconds(ms / 1000.0);
    e.set_at_unix_ms(until_ms);
    events.push_back(e);
  }
  c.set_usage_until_ms(until_ms);
}

bool Controller::Reconcile(v1::Cluster& c, std::vector<v1::ClusterEvent>& events) {
  const int64_t before_version = c.version();
  Pass p{events, clock_->UnixMillis(), !pending_.count(c.id())};
  ObserveNodes(c, p);
  ObserveJobs(c, p);
  if (c.state() != kTerminating) DecideEnd(c, p);
  if (c.state() == kTerminating) {
    TearDown(c, p);
    return p.changed || c.version() != before_version;
  }
  if (!BringUp(c, p)) return true;
  if (c.state() == kRunning || c.state() == kIdle) RunJobs(c, p);
  return p.changed;
}

// 1. Nodes: exits (expected or not) and readiness, as the provider sees them.
void Controller::ObserveNodes(v1::Cluster& c, Pass& p) {
  for (auto& n : *c.mutable_nodes()) {
    if (n.state() != "RUNNING" && n.state() != "STOPPING") continue;
    NodeStatus s = provider_->CheckNode(c, n);
    if (!s.alive) {
      bool expected = n.state() == "STOPPING";
      n.set_state("EXITED");
      n.set_exit_code(s.exit_code);
      n.set_stopped_at_ms(p.now);
      n.set_ready(false);
      // What the session left behind goes with it.
      Note(provider_->StopNode(c, n, true), "stop_node");
      v1::ClusterEvent e = Event(c, "node", "EXITED", expected ? "STOPPING" : "RUNNING",
                                 expected ? "stopped" : absl::StrCat("exited unexpectedly (code ", s.exit_code, ")"));
      e.set_node_group(n.group());
      e.set_log_path(n.log_path());
      p.events.push_back(e);
      p.changed = true;
    } else if (s.ready != n.ready()) {
      n.set_ready(s.ready);
      p.changed = true;
    }
  }
}

// 1. Jobs: ends, and cancellations passed on (forced after stop_grace).
void Controller::ObserveJobs(v1::Cluster& c, Pass& p) {
  for (auto& j : *c.mutable_jobs()) {
    if (j.state() != "RUNNING") continue;
    JobStatus s = provider_->CheckJob(c, j);
    if (s.state == "RUNNING") {
      if (j.cancel_requested()) {
        auto [it, first] = cancel_sent_.try_emplace(j.id(), clock_->Now());
        bool force = !first && clock_->Now() - it->second >= o_.stop_grace;
        if (first || force) Note(provider_->StopJob(c, j, force), "stop_job");
      }
      continue;
    }
    cancel_sent_.erase(j.id());
    std::string state = j.cancel_requested() ? "CANCELLED" : s.state == "STOPPED" ? "CANCELLED" : s.state;
    if (c.state() == kTerminating && state == "FAILED") state = "CANCELLED";
    j.set_state(state);
    j.set_exit_code(s.exit_code);
    j.set_reason(j.cancel_requested() ? "cancelled" : s.message);
    j.set_ended_at_ms(p.now);
    c.set_last_active_ms(p.now);
    v1::ClusterEvent e = Event(c, "job", state, "RUNNING", j.reason());
    e.set_job_id(j.id());
    e.set_log_path(j.log_path());
    p.events.push_back(e);
    p.changed = true;
  }
}

// 2. Should it go away? Deleted, past its lifetime, idle past its TTL,
// stuck provisioning, or its nodes failing: it starts TERMINATING.
void Controller::DecideEnd(v1::Cluster& c, Pass& p) {
  int unexpected = 0;
  for (const auto& n : c.nodes()) unexpected += (n.state() == "EXITED" && n.stop_sent_at_ms() == 0) ? 1 : 0;
  std::string why;
  if (c.delete_requested()) {
    why = "deleted";
  } else if (p.now - c.created_at_ms() >= c.max_lifetime_ms()) {
    why = absl::StrCat("max lifetime of ", c.max_lifetime_ms() / 1000, " s reached");
  } else if (c.state() == kIdle && c.spec().idle_ttl_seconds() > 0 &&
             p.now - c.last_active_ms() >= c.spec().idle_ttl_seconds() * 1000) {
    why = absl::StrCat("idle for ", (p.now - c.last_active_ms()) / 1000, " s (idle TTL ", c.spec().idle_ttl_seconds(), " s)");
  } else if ((c.state() == kRequested || c.state() == kProvisioning) && p.now - c.created_at_ms() >= o_.provision_timeout.count()) {
    c.set_failure(absl::StrCat("provisioning did not finish within ", o_.provision_timeout.count() / 1000, " s"));
    why = c.failure();
  } else if (c.state() == kProvisioning && unexpected > 0) {
    for (const auto& n : c.nodes()) {
      if (n.state() == "EXITED" && n.stop_sent_at_ms() == 0) {
        c.set_failure(absl::StrCat("node ", n.id(), " exited during provisioning (code ", n.exit_code(), "; log ", n.log_path(), ")"));
      }
    }
    why = c.failure();
  } else if (unexpected > o_.max_restarts) {
    c.set_failure(absl::StrCat(unexpected, " unexpected node exits (more than ", o_.max_restarts, ")"));
    why = c.failure();
  }
  if (!why.empty()) {
    SetState(c, kTerminating, why, p.events);
    p.changed = true;
  }
}

// 3a. Tear down: jobs cancelled, nodes stopped (forced after stop_grace);
// once nothing runs, cleaned up and TERMINATED (or FAILED) with its usage.
void Controller::TearDown(v1::Cluster& c, Pass& p) {
  for (auto& j : *c.mutable_jobs()) {
    if (j.state() == "PENDING") {
      EndJob(c, j, "CANCELLED", "the cluster is terminating", p.now, p.events);
      p.changed = true;
    } else if (j.state() == "RUNNING") {
      j.set_cancel_requested(true);
      auto [it, first] = cancel_sent_.try_emplace(j.id(), clock_->Now());
      Note(provider_->StopJob(c, j, !first && clock_->Now() - it->second >= o_.stop_grace), "stop_job");
    }
  }
  bool remaining = false;
  for (auto& n : *c.mutable_nodes()) {
    if (n.state() == "STARTING") {
      // Recorded, never started (or started and adopted at takeover,
      // which made it RUNNING): nothing runs.
      n.set_state("EXITED");
      n.set_stopped_at_ms(p.now);
      n.set_stop_sent_at_ms(p.now);
      p.changed = true;
    } else if (n.state() == "RUNNING" || n.state() == "STOPPING") {
      remaining = true;
      if (n.stop_sent_at_ms() == 0) {
        n.set_state("STOPPING");
        n.set_stop_sent_at_ms(p.now);
        Note(provider_->StopNode(c, n, false), "stop_node");
        p.changed = true;
      } else if (p.now - n.stop_sent_at_ms() >= o_.stop_grace.count()) {
        Note(provider_->StopNode(c, n, true), "stop_node");
      }
    }
  }
  if (!remaining && c.spec().kind() == "ray") {
    // Ray jobs live inside the cluster: with every node gone, so are they.
    for (auto& j : *c.mutable_jobs()) {
      if (j.state() != "RUNNING") continue;
      EndJob(c, j, "CANCELLED", "the cluster ended", p.now, p.events);
      p.changed = true;
    }
  }
  bool jobs_running = std::any_of(c.jobs().begin(), c.jobs().end(), [](const v1::Job& j) { return j.state() == "RUNNING"; });
  if (!remaining && !jobs_running) {
    if (auto st = provider_->CleanupCluster(c); !st.ok()) {
      provider_errors_.Add({{"op", "cleanup"}}).Increment();
      log::Warn("cluster cleanup failed", {{"cluster", c.id()}, {"error", std::string(st.message())}});
    }
    c.set_ended_at_ms(p.now);
    SetState(c, c.failure().empty() ? kTerminated : kFailed, c.failure().empty() ? c.reason() : c.failure(), p.events);
    AddUsage(c, p.now, p.events);
    p.changed = true;
  }
}

// 3b. Bring it up, keep it up. New nodes are recorded first (STARTING)
// and started on a later pass, once that record is durable. False when it
// failed and is now TERMINATING (the pass ends there).
bool Controller::BringUp(v1::Cluster& c, Pass& p) {
  if (c.state() == kRequested) {
    if (auto st = provider_->PrepareCluster(c); !st.ok()) {
      provider_errors_.Add({{"op", "prepare"}}).Increment();
      c.set_failure("cannot prepare the cluster: " + std::string(st.message()));
      SetState(c, kTerminating, c.failure(), p.events);
      return false;
    }
    SetState(c, kProvisioning, "", p.events);
    p.changed = true;
  }
  for (const auto& g : c.spec().node_groups()) {
    std::vector<v1::Node*> live;
    for (auto& n : *c.mutable_nodes()) {
      if (n.group() == g.name() && NodeLive(n)) live.push_back(&n);
    }
    for (int i = static_cast<int>(live.size()); i < g.count(); ++i) {
      v1::Node* n = c.add_nodes();
      n->set_id(absl::StrCat(c.id(), "-", g.name(), "-", c.next_node()));
      c.set_next_node(c.next_node() + 1);
      n->set_group(g.name());
      n->set_state("STARTING");
      n->set_exit_code(-1);
      p.changed = true;
    }
    // Scale down: the newest nodes go first.
    for (int i = static_cast<int>(live.size()) - 1; i >= g.count(); --i) {
      v1::Node* n = live[i];
      if (n->state() == "STARTING") {
        n->set_state("EXITED");
        n->set_stopped_at_ms(p.now);
      } else {
        n->set_state("STOPPING");
        Note(provider_->StopNode(c, *n, false), "stop_node");
      }
      n->set_stop_sent_at_ms(p.now);
      p.changed = true;
    }
  }
  for (auto& n : *c.mutable_nodes()) {
    if (n.state() == "STOPPING" && p.now - n.stop_sent_at_ms() >= o_.stop_grace.count()) Note(provider_->StopNode(c, n, true), "stop_node");
    if (n.state() != "STARTING" || !p.durable || p.changed) continue;
    if (auto st = provider_->StartNode(c, n); !st.ok()) {
      provider_errors_.Add({{"op", "start_node"}}).Increment();
      if (st.code() == absl::StatusCode::kUnavailable) {
        // Transient (the API server, a port): the next pass tries again,
        // within the provisioning timeout.
        log::Warn("node not started yet", {{"cluster", c.id()}, {"node", n.id()}, {"error", std::string(st.message())}});
        continue;
      }
      c.set_failure("cannot start node " + n.id() + ": " + std::string(st.message()));
      n.set_state("EXITED");
      n.set_stopped_at_ms(p.now);
      SetState(c, kTerminating, c.failure(), p.events);
      return false;
    }
    n.set_state("RUNNING");
    n.set_started_at_ms(p.now);
    v1::ClusterEvent e = Event(c, "node", "RUNNING", "STARTING", "");
    e.set_node_group(n.group());
    e.set_log_path(n.log_path());
    p.events.push_back(e);
    p.changed = true;
  }
  // Ready when every group has its count of running, ready nodes.
  bool ready = true;
  for (const auto& g : c.spec().node_groups()) {
    int ok = 0;
    for (const auto& n : c.nodes()) ok += (n.group() == g.name() && n.state() == "RUNNING" && n.ready()) ? 1 : 0;
    ready = ready && ok >= g.count();
  }
  if (c.state() == kProvisioning && ready) {
    c.set_running_at_ms(p.now);
    c.set_last_active_ms(p.now);
    SetState(c, kRunning, absl::StrCat("provisioned in ", p.now - c.created_at_ms(), " ms"), p.events);
    p.changed = true;
  }
  return true;
}

// A RUNNING or IDLE cluster: pending jobs submitted (once their record is
// durable), RUNNING <-> IDLE as jobs come and go, and periodic usage.
void Controller::RunJobs(v1::Cluster& c, Pass& p) {
  for (auto& j : *c.mutable_jobs()) {
    if (j.state() != "PENDING") continue;
    if (j.cancel_requested()) {
      EndJob(c, j, "CANCELLED", "cancelled before it started", p.now, p.events);
      p.changed = true;
      continue;
    }
    if (!p.durable || p.changed) continue;  // the job's record first
    if (auto st = provider_->SubmitJob(c, j); !st.ok()) {
      provider_errors_.Add({{"op", "submit_job"}}).Increment();
      if (st.code() == absl::StatusCode::kUnavailable) {
        log::Warn("job not started yet", {{"cluster", c.id()}, {"job", j.id()}, {"error", std::string(st.message())}});
        continue;  // transient: the next pass submits it again (idempotent by job id)
      }
      j.set_state("FAILED");
      j.set_reason("cannot start: " + std::string(st.message()));
      j.set_ended_at_ms(p.now);
    } else {
      j.set_state("RUNNING");
      j.set_started_at_ms(p.now);
    }
    v1::ClusterEvent e = Event(c, "job", j.state(), "PENDING", j.reason());
    e.set_job_id(j.id());
    e.set_log_path(j.log_path());
    p.events.push_back(e);
    p.changed = true;
  }
  bool active = std::any_of(c.jobs().begin(), c.jobs().end(), JobActive);
  if (active && c.state() == kIdle) {
    SetState(c, kRunning, "a job is active", p.events);
    p.changed = true;
  } else if (!active && c.state() == kRunning) {
    c.set_last_active_ms(std::max(c.last_active_ms(), p.now));
    SetState(c, kIdle, "no active job", p.events);
    p.changed = true;
  }
  if (p.now - std::max(c.usage_until_ms(), c.created_at_ms()) >= o_.usage_interval.count()) {
    AddUsage(c, p.now, p.events);
    p.changed = true;
  }
}

void Controller::ReconcileOnce() {
  std::lock_guard act(act_mu_);
  if (!leading_ || fenced_) return;
  auto start = std::chrono::steady_clock::now();
  {
    std::lock_guard lock(mu_);
    if (reload_needed_) return;
    for (auto& [id, c] : clusters_) {
      if (Ended(c)) continue;
      std::vector<v1::ClusterEvent> events;
      if (Reconcile(c, events)) PersistLocked(c, std::move(events));
    }
    std::map<std::string, int> counts;
    for (const char* s : {kRequested, kProvisioning, kRunning, kIdle, kTerminating, kTerminated, kFailed}) counts[s] = 0;
    for (const auto& [_, c] : clusters_) ++counts[c.state()];
    for (const auto& [s, n] : counts) by_state_.Add({{"state", s}}).Set(n);
  }
  SendOutbox();
  reconcile_seconds_.Observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

void Controller::SweepOrphans() {
  std::lock_guard act(act_mu_);
  if (!leading_ || fenced_) return;
  auto inventory = provider_->Inventory();
  if (!inventory.ok()) {
    provider_errors_.Add({{"op", "inventory"}}).Increment();
    return;
  }
  std::lock_guard lock(mu_);
  for (const Owned& o : *inventory) {
    auto it = clusters_.find(o.cluster_id);
    bool wanted = false;
    if (it != clusters_.end() && !Ended(it->second)) {
      for (const auto& n : it->second.nodes()) {
        // A node still being stopped is wanted until it is gone. Its
        // processes may sit in sessions of their own (Ray's workers), so
        // the node id decides, not the session.
        wanted = wanted || (!o.node_id.empty() && n.id() == o.node_id && n.state() != "EXITED");
        // Whatever runs in a live node's session is that node's.
        wanted = wanted || (o.sid > 0 && n.pid() == o.sid && n.state() != "EXITED");
      }
      for (const auto& j : it->second.jobs()) {
        wanted = wanted || (!o.job_id.empty() && j.id() == o.job_id && j.pid() == o.sid && j.state() == "RUNNING");
      }
    }
    if (wanted) continue;
    log::Warn("removing an orphan", {{"cluster", o.cluster_id}, {"node", o.node_id}, {"job", o.job_id}, {"pid", o.pid}});
    if (auto st = provider_->Remove(o); !st.ok()) {
      provider_errors_.Add({{"op", "remove"}}).Increment();
    } else {
      orphans_removed_.Increment();
    }
  }
}

}  // namespace relay::lifecycle
