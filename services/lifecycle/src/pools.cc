#include "relay/lifecycle/pools.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <boost/json.hpp>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "relay/base/log.h"
#include "relay/github/webhook_signature.h"
#include "relay/v1/webhook.pb.h"

namespace relay::lifecycle {
namespace {

namespace json = boost::json;

std::string Lower(std::string s) { return absl::AsciiStrToLower(s); }

bool ValidPoolName(const std::string& s) {
  return !s.empty() && s.size() <= 32 &&
         std::all_of(s.begin(), s.end(), [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'; });
}

}  // namespace

absl::StatusOr<std::vector<PoolSpec>> ParsePools(const std::string& yaml, const std::string& origin) {
  auto bad = [&](const std::string& why) { return absl::InvalidArgumentError("pools file " + origin + ": " + why); };
  std::vector<PoolSpec> out;
  try {
    YAML::Node root = YAML::Load(yaml);
    if (!root.IsMap() || !root["pools"] || !root["pools"].IsSequence()) return bad("needs a `pools:` list");
    std::set<std::string> names;
    for (const auto& p : root["pools"]) {
      PoolSpec s;
      s.name = p["name"] ? p["name"].as<std::string>() : "";
      if (!ValidPoolName(s.name)) return bad("pool name '" + s.name + "' is not [a-z0-9-]{1,32}");
      if (!names.insert(s.name).second) return bad("pool " + s.name + " is listed twice");
      auto where = [&](const std::string& why) { return bad("pool " + s.name + ": " + why); };
      s.team = p["team"] ? p["team"].as<std::string>() : "";
      if (s.team.empty()) return where("no team");
      if (!p["labels"] || !p["labels"].IsSequence() || p["labels"].size() == 0) return where("needs labels");
      for (const auto& l : p["labels"]) s.labels.insert(Lower(l.as<std::string>()));
      s.labels.erase("self-hosted");  // every self-hosted runner has it; matching ignores it
      if (s.labels.empty()) return where("needs a label besides self-hosted");
      if (p["repos"]) {
        for (const auto& r : p["repos"]) s.repos.insert(Lower(r.as<std::string>()));
      }
      s.min = p["min"] ? p["min"].as<int>() : 0;
      s.max = p["max"] ? p["max"].as<int>() : 1;
      if (s.min < 0 || s.max < 1 || s.min > s.max || s.max > 1000) return where("needs 0 <= min <= max, 1 <= max <= 1000");
      for (auto [key, into] : {std::pair{"scale_down_delay", &s.scale_down_delay}, std::pair{"reservation_ttl", &s.reservation_ttl}}) {
        if (!p[key]) continue;
        absl::Duration d;
        if (!absl::ParseDuration(p[key].as<std::string>(), &d) || d < absl::ZeroDuration() || d > absl::Hours(24 * 7)) {
          return where(std::string(key) + " is not a duration up to 7 days (e.g. 10m)");
        }
        *into = std::chrono::milliseconds(absl::ToInt64Milliseconds(d));
      }
      if (!p["command"] || !p["command"].IsSequence() || p["command"].size() == 0) return where("needs a command (argv list)");
      for (const auto& a : p["command"]) s.command.push_back(a.as<std::string>());
      out.push_back(std::move(s));
    }
  } catch (const YAML::Exception& e) {
    return bad(e.what());
  }
  // Two pools with the same labels whose repositories overlap could never
  // be told apart: refuse rather than pick one silently.
  for (size_t i = 0; i < out.size(); ++i) {
    for (size_t j = i + 1; j < out.size(); ++j) {
      bool repos_overlap = out[i].repos.empty() || out[j].repos.empty() ||
                           std::any_of(out[i].repos.begin(), out[i].repos.end(), [&](const std::string& r) { return out[j].repos.count(r); });
      if (out[i].labels == out[j].labels && repos_overlap) {
        return bad("pools " + out[i].name + " and " + out[j].name + " have the same labels for the same repositories");
      }
    }
  }
  return out;
}

absl::StatusOr<std::vector<PoolSpec>> LoadPools(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::InvalidArgumentError("cannot read pools file " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ParsePools(ss.str(), path);
}

absl::StatusOr<WorkflowJobEvent> ParseWorkflowJob(std::string_view text, int64_t at_ms) {
  boost::system::error_code ec;
  json::value v = json::parse(json::string_view(text.data(), text.size()), ec);
  if (ec || !v.is_object()) return absl::InvalidArgumentError("not a JSON object");
  const json::object& o = v.as_object();
  const json::value* action = o.if_contains("action");
  const json::value* job = o.if_contains("workflow_job");
  if (!action || !action->is_string() || !job || !job->is_object()) return absl::InvalidArgumentError("not a workflow_job event");
  WorkflowJobEvent e;
  e.action = std::string(action->as_string());
  e.at_ms = at_ms;
  const json::object& j = job->as_object();
  const json::value* id = j.if_contains("id");
  if (!id || !id->is_number()) return absl::InvalidArgumentError("workflow_job without an id");
  e.job_id = id->is_int64() ? id->as_int64() : static_cast<int64_t>(id->as_uint64());
  if (const json::value* labels = j.if_contains("labels"); labels && labels->is_array()) {
    for (const auto& l : labels->as_array()) {
      if (l.is_string()) e.labels.push_back(Lower(std::string(l.as_string())));
    }
  }
  if (const json::value* repo = o.if_contains("repository"); repo && repo->is_object()) {
    if (const json::value* name = repo->as_object().if_contains("full_name"); name && name->is_string()) {
      e.repository = Lower(std::string(name->as_string()));
    }
  }
  return e;
}

PoolScaler::PoolScaler(std::vector<PoolSpec> pools) : pools_(std::move(pools)) {}

std::string PoolScaler::Match(const WorkflowJobEvent& e) const {
  const PoolSpec* best = nullptr;
  for (const auto& p : pools_) {
    if (!p.repos.empty() && !p.repos.count(e.repository)) continue;
    bool all = !e.labels.empty();
    for (const auto& l : e.labels) all = all && (l == "self-hosted" || p.labels.count(l));
    if (all && (!best || p.labels.size() < best->labels.size())) best = &p;
  }
  return best ? best->name : "";
}

std::string PoolScaler::Apply(const WorkflowJobEvent& e) {
  std::string name = Match(e);
  if (name.empty()) return "";
  const PoolSpec& spec = *std::find_if(pools_.begin(), pools_.end(), [&](const PoolSpec& p) { return p.name == name; });
  std::lock_guard lock(mu_);
  State& s = state_[name];
  const int64_t ttl = spec.reservation_ttl.count();
  // Forget what expired (by event time: a replay gives the same result).
  for (auto* m : {&s.reserved, &s.completed}) {
    for (auto it = m->begin(); it != m->end();) it = it->second <= e.at_ms ? m->erase(it) : std::next(it);
  }
  if (e.action == "queued" || e.action == "in_progress") {
    if (!s.completed.count(e.job_id)) s.reserved.try_emplace(e.job_id, e.at_ms + ttl);
  } else if (e.action == "completed") {
    s.reserved.erase(e.job_id);
    s.completed[e.job_id] = e.at_ms + ttl;
  } else {
    return "";  // waiting and the like: no runner is asked for yet
  }
  return name;
}

int PoolScaler::Reservations(const std::string& pool, int64_t now_ms) const {
  std::lock_guard lock(mu_);
  auto it = state_.find(pool);
  if (it == state_.end()) return 0;
  int n = 0;
  for (const auto& [_, expiry] : it->second.reserved) n += expiry > now_ms ? 1 : 0;
  return n;
}

int PoolScaler::Desired(const std::string& pool, int64_t now_ms) {
  auto spec = std::find_if(pools_.begin(), pools_.end(), [&](const PoolSpec& p) { return p.name == pool; });
  if (spec == pools_.end()) return 0;
  int target = std::clamp(spec->min + Reservations(pool, now_ms), spec->min, spec->max);
  std::lock_guard lock(mu_);
  State& s = state_[pool];
  if (s.current < 0) {
    s.current = target;
    s.last_scale_up_ms = now_ms;
  } else if (target > s.current) {
    s.current = target;
    s.last_scale_up_ms = now_ms;
  } else if (target < s.current && now_ms - s.last_scale_up_ms >= spec->scale_down_delay.count()) {
    s.current = target;
  }
  return s.current;
}

}  // namespace relay::lifecycle

// ------------------------------------------------------------ PoolManager


namespace relay::lifecycle {
namespace {

constexpr char kPoolLabel[] = "relay.dev/pool";

class Manager final : public PoolManager {
 public:
  Manager(std::vector<PoolSpec> pools, Controller* controller, const Clock* clock, prometheus::Registry* metrics)
      : scaler_(std::move(pools)),
        controller_(controller),
        clock_(clock),
        events_(prometheus::BuildCounter()
                    .Name("relay_lifecycle_pool_webhooks_total")
                    .Help("workflow_job webhooks counted for a pool, by pool (unmatched: pool=\"\")")
                    .Register(*metrics)),
        desired_(prometheus::BuildGauge()
                     .Name("relay_lifecycle_pool_desired_runners")
                     .Help("Runners each pool should have now")
                     .Register(*metrics)),
        skipped_(prometheus::BuildCounter()
                     .Name("relay_lifecycle_pool_webhooks_skipped_total")
                     .Help("github.webhooks records the pools could not read, by reason (the group consumers "
                           "dead-letter them; this follower only counts and logs)")
                     .Register(*metrics)) {}

  absl::Status Follow(const std::string& bootstrap, const std::string& topic, const kafka::FollowerFactory& follow) {
    kafka::FollowerOptions o;
    o.bootstrap = bootstrap;
    o.topic = topic;
    o.from_beginning = true;
    o.client_id = "relay-lifecycle-pools";
    auto f = follow(o, [this](const kafka::ConsumedRecord& r) { OnRecord(r); });
    if (!f.ok()) return f.status();
    follower_ = std::move(*f);
    return absl::OkStatus();
  }

  void Tick() override {
    if (!controller_->leading() || !follower_->CaughtUp()) return;
    const auth::Caller system{"relay-lifecycle-pools", "", true, "internal"};
    for (const PoolSpec& p : scaler_.pools()) {
      int want = scaler_.Desired(p.name, clock_->UnixMillis());
      desired_.Add({{"pool", p.name}}).Set(want);
      std::string id = ClusterOf(system, p);
      if (id.empty()) continue;
      if (auto st = controller_->SetGroupCount(id, "runners", want); !st.ok()) {
        log::Warn("pool not scaled", {{"pool", p.name}, {"cluster", id}, {"error", std::string(st.message())}});
      }
    }
  }

  absl::Status Health() const override { return follower_ ? follower_->Health() : absl::OkStatus(); }

 private:
  void OnRecord(const kafka::ConsumedRecord& r) {
    v1::WebhookRecord w;
    if (!w.ParseFromString(r.value)) return Skip(r, "undecodable", "not a WebhookRecord");
    if (w.event() != "workflow_job") return;
    std::string decoded;
    std::string_view json;
    if (!github::WebhookJson(w.content_type(), w.body(), &decoded, &json)) {
      return Skip(r, "payload", "no JSON payload in the body");
    }
    auto e = ParseWorkflowJob(json, w.received_at_unix_ms() > 0 ? w.received_at_unix_ms() : r.timestamp_ms);
    if (!e.ok()) return Skip(r, "payload", std::string(e.status().message()));
    events_.Add({{"pool", scaler_.Apply(*e)}}).Increment();
  }

  // A record this follower cannot count. Not dead-lettered here: it reads
  // the whole topic on every start, and the topic's group consumers
  // (dispatch, stats) already send poison to github.webhooks.dlq.
  void Skip(const kafka::ConsumedRecord& r, const char* reason, std::string_view why) {
    skipped_.Add({{"reason", reason}}).Increment();
    log::Warn("webhook record skipped by the runner pools",
              {{"partition", r.partition}, {"offset", r.offset}, {"reason", std::string(why)}});
  }

  // The pool's live cluster, created when there is none (the first time,
  // or after it ended: e.g. its max lifetime).
  std::string ClusterOf(const auth::Caller& system, const PoolSpec& p) {
    v1::ListClustersRequest q;
    (*q.mutable_labels())[kPoolLabel] = p.name;
    auto live = controller_->List(system, q);
    if (!live.ok()) return "";
    for (const auto& c : *live) {
      if (c.state() != "TERMINATING") return c.id();
    }
    if (!live->empty()) return "";  // the old one is still going away
    v1::CreateClusterRequest req;
    req.set_request_id("pool-" + p.name + "-" + std::to_string(clock_->UnixMillis()));
    *req.mutable_spec() = PoolClusterSpec(p);
    auto created = controller_->Create(system, req);
    if (!created.ok()) {
      log::Warn("pool cluster not created", {{"pool", p.name}, {"error", std::string(created.status().message())}});
      return "";
    }
    log::Info("pool cluster created", {{"pool", p.name}, {"cluster", created->id()}});
    return created->id();
  }

  PoolScaler scaler_;
  Controller* controller_;
  const Clock* clock_;
  std::unique_ptr<kafka::Follower> follower_;
  prometheus::Family<prometheus::Counter>& events_;
  prometheus::Family<prometheus::Gauge>& desired_;
  prometheus::Family<prometheus::Counter>& skipped_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<PoolManager>> PoolManager::Start(std::vector<PoolSpec> pools, const std::string& bootstrap,
                                                                const std::string& webhooks_topic, Controller* controller,
                                                                const Clock* clock, prometheus::Registry* metrics,
                                                                const kafka::FollowerFactory& follow) {
  auto m = std::make_unique<Manager>(std::move(pools), controller, clock, metrics);
  if (auto st = m->Follow(bootstrap, webhooks_topic, follow); !st.ok()) return st;
  return std::unique_ptr<PoolManager>(std::move(m));
}

v1::ClusterSpec PoolClusterSpec(const PoolSpec& p) {
  v1::ClusterSpec s;
  s.set_kind("command");
  s.set_team(p.team);
  (*s.mutable_labels())[kPoolLabel] = p.name;
  auto* g = s.add_node_groups();
  g->set_name("runners");
  g->set_count(p.min);
  for (const auto& a : p.command) g->add_command(a);
  return s;
}

}  // namespace relay::lifecycle
