#include "relay/dispatch/planner.h"

#include <algorithm>

#include <boost/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "relay/base/json_fields.h"
#include "relay/base/status.h"
#include "relay/base/digest.h"
#include "relay/github/api.h"
#include "relay/github/webhook_signature.h"

namespace relay::dispatch {
namespace {

namespace json = boost::json;

constexpr std::string_view kCrcrLabel = "ciflow/crcr/";
constexpr size_t kMaxSlimLabels = 100;

bool StartsWith(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

std::string Lower(std::string_view s) { return absl::AsciiStrToLower(absl::string_view(s.data(), s.size())); }

// A copy of o[key] (when present) into out[key].
void Keep(const json::object& o, std::string_view key, json::object& out) {
  if (const json::value* v = o.if_contains(key)) out[key] = *v;
}

// What downstream CI needs when the whole payload does not fit: repository,
// number, action, head and base sha and ref, labels, sender, and a push's
// before/after/ref.
json::object Slim(const json::object& payload) {
  json::object out;
  for (const char* k : {"action", "number", "before", "after", "ref", "created", "deleted", "forced"}) Keep(payload, k, out);
  if (const json::object* repo = ObjectField(payload, "repository")) {
    json::object r;
    for (const char* k : {"id", "name", "full_name", "html_url", "clone_url", "default_branch"}) Keep(*repo, k, r);
    out["repository"] = std::move(r);
  }
  if (const json::object* sender = ObjectField(payload, "sender")) {
    json::object s;
    for (const char* k : {"login", "id", "type"}) Keep(*sender, k, s);
    out["sender"] = std::move(s);
  }
  if (const json::object* head = ObjectField(payload, "head_commit")) {
    json::object h;
    Keep(*head, "id", h);
    out["head_commit"] = std::move(h);
  }
  if (const json::object* pr = ObjectField(payload, "pull_request")) {
    json::object p;
    for (const char* k : {"id", "number", "state", "html_url", "merged", "draft"}) Keep(*pr, k, p);
    for (const char* side : {"head", "base"}) {
      if (const json::object* ref = ObjectField(*pr, side)) {
        json::object r;
        Keep(*ref, "sha", r);
        Keep(*ref, "ref", r);
        if (const json::object* rr = ObjectField(*ref, "repo")) r["repo"] = json::object{{"full_name", std::string(StringField(rr, "full_name"))}};
        p[side] = std::move(r);
      }
    }
    if (const json::value* labels = pr->if_contains("labels"); labels && labels->is_array()) {
      json::array names;
      for (const auto& l : labels->as_array()) {
        if (names.size() >= kMaxSlimLabels) break;
        if (l.is_object()) names.push_back(json::object{{"name", std::string(StringField(l.as_object(), "name"))}});
      }
      p["labels"] = std::move(names);
    }
    out["pull_request"] = std::move(p);
  }
  return out;
}

// The names of a PR's labels.
std::vector<std::string> LabelNames(const json::object* pr) {
  std::vector<std::string> names;
  const json::value* labels = pr ? pr->if_contains("labels") : nullptr;
  if (!labels || !labels->is_array()) return names;
  for (const auto& l : labels->as_array()) {
    if (l.is_object()) names.emplace_back(StringField(l.as_object(), "name"));
  }
  return names;
}

std::vector<std::string> CrcrDevices(const json::object* pr) {
  std::vector<std::string> devices;
  if (!pr) return devices;
  const json::value* labels = pr->if_contains("labels");
  if (!labels || !labels->is_array()) return devices;
  for (const auto& l : labels->as_array()) {
    std::string name = l.is_object() ? std::string(StringField(l.as_object(), "name")) : "";
    if (StartsWith(name, kCrcrLabel) && name.size() > kCrcrLabel.size()) {
      devices.push_back(name.substr(kCrcrLabel.size()));
    }
  }
  std::sort(devices.begin(), devices.end());
  devices.erase(std::unique(devices.begin(), devices.end()), devices.end());
  return devices;
}

}  // namespace

github::EventTime EventTimeOf(const v1::WebhookRecord& record, const boost::json::object* pull_request) {
  github::EventTime at;
  at.received_at_unix_ms = record.received_at_unix_ms();
  std::optional<int64_t> updated = github::ParseIsoTime(std::string(StringField(pull_request, "updated_at")));
  at.event_at_unix_ms = updated ? *updated * 1000 : record.received_at_unix_ms();
  return at;
}

ClientPayload BuildDispatchBody(const std::string& event, const std::string& delivery_id,
                                const std::string& payload_json, const std::string& relay_token) {
  auto assemble = [&](const std::string& payload, bool slimmed) {
    std::string body = "{\"event_type\":" + JsonQuote(event) + ",\"client_payload\":{\"event_type\":" + JsonQuote(event) +
                       ",\"delivery_id\":" + JsonQuote(delivery_id) + ",\"payload\":" + payload +
                       ",\"relay_token\":" + JsonQuote(relay_token);
    if (slimmed) body += ",\"slimmed\":true";
    body += "}}";
    return body;
  };
  ClientPayload out;
  out.request_json = assemble(payload_json, false);
  if (out.request_json.size() < kMaxDispatchBytes) return out;
  json::value full = json::parse(payload_json);
  out.request_json = assemble(json::serialize(Slim(full.as_object())), true);
  out.slimmed = true;
  return out;
}

namespace {

// check_run / check_suite rerequested: a re-run of the failed jobs behind a
// relay check run (or every one of the suite), into `plan`.
absl::Status PlanRerequested(const v1::WebhookRecord& record, const json::object& payload, const std::string& event,
                             const std::string& action, const std::string& body_sha,
                             const allowlist::Allowlist& allowlist, const PlannerOptions& options,
                             int64_t now_unix_ms, Plan& plan) {
  if (action != "rerequested") {
    plan.ignored = event + "." + action;
    return absl::OkStatus();
  }
  const json::object* subject = ObjectField(payload, event);
  if (!subject) return absl::InvalidArgumentError(event + " event without " + event);
  std::string app = std::to_string(IntField(ObjectField(*subject, "app"), "id"));
  if (!options.app_id.empty() && app != options.app_id) {
    plan.ignored = event + " of another app";
    return absl::OkStatus();
  }
  v1::GitHubRequest req;
  req.set_delivery_id(record.delivery_id());
  req.set_requested_at_unix_ms(now_unix_ms);
  if (event == "check_run") {
    auto ref = ParseCheckRun(std::string(StringField(subject, "name")), std::string(StringField(subject, "external_id")));
    if (!ref) {
      plan.ignored = "check_run not made by the relay";
      return absl::OkStatus();
    }
    const allowlist::Entry* entry = allowlist.Find(ref->downstream_repo);
    if (!entry) {
      plan.ignored = "check_run of a repository no longer allowlisted";
      return absl::OkStatus();
    }
    req.set_id(RequestId({"rerun", record.delivery_id(), body_sha, Lower(entry->repo), std::to_string(ref->run_id)}));
    req.set_repo(entry->repo);
    req.set_level(static_cast<int>(entry->level));
    req.mutable_rerun()->set_run_id(ref->run_id);
  } else {
    int64_t suite = IntField(subject, "id");
    if (suite <= 0) return absl::InvalidArgumentError("check_suite event without check_suite.id");
    req.set_id(RequestId({"suite_rerun", record.delivery_id(), body_sha, std::to_string(suite)}));
    req.set_repo(record.repository());
    req.set_level(4);  // upstream maintainers asked: first in line
    req.mutable_suite_rerun()->set_check_suite_id(suite);
    req.mutable_suite_rerun()->set_app_id(options.app_id);
  }
  plan.requests.push_back(std::move(req));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Plan> PlanWebhook(const v1::WebhookRecord& record, const allowlist::Allowlist& allowlist,
                                 const auth::RelayTokenKeys& tokens, const PlannerOptions& options,
                                 int64_t now_unix_ms) {
  Plan plan;
  if (Lower(record.repository()) != Lower(options.upstream_repo)) {
    plan.ignored = record.repository().empty() ? "no repository" : "not the upstream repository";
    return plan;
  }
  std::string decoded;
  std::string_view payload_text;
  if (!github::WebhookJson(record.content_type(), record.body(), &decoded, &payload_text)) {
    return absl::InvalidArgumentError("webhook body has an unsupported content type");
  }
  boost::system::error_code ec;
  json::value doc = json::parse(json::string_view(payload_text.data(), payload_text.size()), ec);
  if (ec || !doc.is_object()) return absl::InvalidArgumentError("webhook body is not a JSON object");
  const json::object& payload = doc.as_object();
  const std::string& event = record.event();
  std::string action = std::string(StringField(payload, "action"));
  std::string body_sha = Hex(record.body_sha256());
  if (body_sha.empty()) {  // records from before body_sha256 existed
    body_sha = Sha256Hex(record.body());
  }

  // What a repository asks for: the event's action (none for a push) among
  // its events, and for a PR one of its labels on it (the label added, for
  // `labeled`). Empty: dispatched; else why not.
  auto not_wanted = [&](const allowlist::Subscription& sub, const std::vector<std::string>& pr_labels,
                        const std::string& added) -> std::string {
    const std::string& act = event == "push" ? std::string() : action;
    if (!sub.WantsEvent(event, act)) return "event";
    if (event != "pull_request" || sub.labels.empty()) return "";
    if (action == "labeled") return sub.MatchesLabel(added) ? "" : "label";
    for (const auto& l : pr_labels) {
      if (sub.MatchesLabel(l)) return "";
    }
    return "label";
  };
  auto fan_out = [&](int64_t pr_number, const std::string& head_sha, const std::vector<std::string>& pr_labels,
                     const std::string& added) {
    // One body for all, but each repo its own relay token.
    int64_t now_s = now_unix_ms / 1000;
    const github::EventTime at = EventTimeOf(record, ObjectField(payload, "pull_request"));
    for (const auto& entry : allowlist.entries()) {
      if (std::string why = not_wanted(entry.subscription, pr_labels, added); !why.empty()) {
        // Counted only when it is a write the repo would have had before
        // subscriptions: what subscriptions save.
        if (not_wanted(allowlist::Subscription::Default(), pr_labels, added).empty()) {
          plan.filtered.emplace_back(entry.repo, why);
        }
        continue;
      }
      std::string token = tokens.Sign(record.delivery_id(), entry.repo, now_s, options.token_ttl_seconds);
      ClientPayload body = BuildDispatchBody(event, record.delivery_id(), std::string(payload_text), token);
      v1::GitHubRequest req;
      req.set_id(RequestId({"dispatch", record.delivery_id(), body_sha, Lower(entry.repo)}));
      req.set_repo(entry.repo);
      req.set_level(static_cast<int>(entry.level));
      req.set_delivery_id(record.delivery_id());
      req.set_requested_at_unix_ms(now_unix_ms);
      auto* d = req.mutable_dispatch();
      d->set_event_type(event);
      d->set_client_payload_json(std::move(body.request_json));
      d->set_slimmed(body.slimmed);
      d->set_token_key_id(tokens.signing_key_id());
      d->set_token_expires_at_unix(now_s + options.token_ttl_seconds);
      d->set_upstream_repo(record.repository());
      d->set_event(event);
      d->set_action(action);
      d->set_pr_number(pr_number);
      d->set_head_sha(head_sha);
      d->set_event_at_unix_ms(at.event_at_unix_ms);
      d->set_received_at_unix_ms(at.received_at_unix_ms);
      plan.requests.push_back(std::move(req));
    }
  };

  if (event == "pull_request") {
    const json::object* pr = ObjectField(payload, "pull_request");
    int64_t number = IntField(payload, "number");
    if (!pr || number <= 0) return absl::InvalidArgumentError("pull_request event without pull_request/number");
    std::string head_sha = std::string(StringField(ObjectField(*pr, "head"), "sha"));
    std::vector<std::string> devices = CrcrDevices(pr);
    bool label_event = action == "labeled" || action == "unlabeled";
    bool crcr_label = label_event && StartsWith(std::string(StringField(ObjectField(payload, "label"), "name")), kCrcrLabel);
    if (crcr_label || (!devices.empty() && (action == "opened" || action == "reopened" || action == "synchronize"))) {
      v1::PullRequestLabels facts;
      facts.set_upstream_repo(record.repository());
      facts.set_number(number);
      for (auto& d : devices) facts.add_crcr_devices(d);
      facts.set_head_sha(head_sha);
      facts.set_updated_at_unix_ms(now_unix_ms);
      facts.set_delivery_id(record.delivery_id());
      // The event's own time, not the time it is read: a replay or a late
      // redelivery of this event must not outrank a newer one. GitHub's
      // time of the change first (it survives a redelivery, which intake
      // receives anew); intake's receipt orders two events of one second.
      github::EventTime at = EventTimeOf(record, pr);
      facts.set_event_at_unix_ms(at.event_at_unix_ms);
      facts.set_received_at_unix_ms(at.received_at_unix_ms);
      plan.labels = std::move(facts);
    }
    bool dispatched_action = action == "opened" || action == "reopened" || action == "synchronize" || action == "closed";
    // `labeled` fans out only to repos that ask for it; before
    // subscriptions it made only a label fact.
    bool labeled_wanted = action == "labeled" &&
                          std::any_of(allowlist.entries().begin(), allowlist.entries().end(), [](const auto& e) {
                            return e.subscription.WantsEvent("pull_request", "labeled");
                          });
    if (dispatched_action || labeled_wanted) {
      if (head_sha.empty()) return absl::InvalidArgumentError("pull_request event without head.sha");
      fan_out(number, head_sha, LabelNames(pr), std::string(StringField(ObjectField(payload, "label"), "name")));
      if (plan.requests.empty() && (labeled_wanted || !plan.filtered.empty()) && !plan.labels) plan.ignored = "pull_request." + action + ": no repository subscribes";
    } else if (!plan.labels) {
      plan.ignored = "pull_request." + action;
    }
    return plan;
  }
  if (event == "push") {
    if (payload.contains("deleted") && payload.at("deleted").is_bool() && payload.at("deleted").as_bool()) {
      plan.ignored = "push deleting " + std::string(StringField(payload, "ref"));
      return plan;
    }
    std::string after = std::string(StringField(payload, "after"));
    if (after.empty() || std::string(StringField(payload, "ref")).empty()) return absl::InvalidArgumentError("push event without ref/after");
    fan_out(0, after, {}, "");
    if (plan.requests.empty() && !plan.filtered.empty()) plan.ignored = "push: no repository subscribes";
    return plan;
  }
  if (event == "check_run" || event == "check_suite") {
    RELAY_RETURN_IF_ERROR(PlanRerequested(record, payload, event, action, body_sha, allowlist, options, now_unix_ms, plan));
    return plan;
  }
  plan.ignored = event;
  return plan;
}

absl::Status ValidateRequest(const v1::GitHubRequest& r, const allowlist::Allowlist& list,
                             const PlannerOptions& options) {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError("github.requests record " + r.id() + " refused: " + why);
  };
  if (r.id().empty()) return bad("no id");
  if (!allowlist::IsValidRepoName(r.repo())) return bad("'" + r.repo() + "' is not an owner/name repository");
  bool upstream = absl::EqualsIgnoreCase(r.repo(), options.upstream_repo);
  bool listed = list.Find(r.repo()) != nullptr;
  auto hex = [](const std::string& s) {
    return (s.size() == 40 || s.size() == 64) && s.find_first_not_of("0123456789abcdefABCDEF") == std::string::npos;
  };
  switch (r.call_case()) {
    case v1::GitHubRequest::kRedelivery:
      return bad("webhook redeliveries are asked by dispatch's own reconciler, never through github.requests");
    case v1::GitHubRequest::kDispatch:
      if (!listed) return bad("dispatches go to allowlisted repositories only, not " + r.repo());
      if (r.dispatch().event_type().empty() || r.dispatch().event_type().size() > 100) return bad("event_type must be 1-100 characters");
      if (const allowlist::Entry* e = list.Find(r.repo()); e->subscribed) {
        // A repository with a subscription gets only what it asked for,
        // whoever asks (its labels cannot be checked here: no PR).
        const std::string& ev = r.dispatch().event().empty() ? r.dispatch().event_type() : r.dispatch().event();
        if (!e->subscription.WantsEvent(ev, ev == "push" ? "" : r.dispatch().action())) {
          return bad(r.repo() + " does not subscribe to " + ev + (r.dispatch().action().empty() ? "" : "." + r.dispatch().action()));
        }
      }
      return absl::OkStatus();
    case v1::GitHubRequest::kRerun:
      if (!listed) return bad("re-runs go to allowlisted repositories only, not " + r.repo());
      if (r.rerun().run_id() <= 0) return bad("run_id must be positive");
      return absl::OkStatus();
    case v1::GitHubRequest::kCheckRun:
      if (!upstream) return bad("check runs go to the upstream repository " + options.upstream_repo + " only, not " + r.repo());
      if (!hex(r.check_run().head_sha())) return bad("head_sha must be 40 or 64 hex digits");
      if (r.check_run().name().empty() || r.check_run().name().size() > 255) return bad("check run name must be 1-255 characters");
      return absl::OkStatus();
    case v1::GitHubRequest::kComment:
      if (!upstream) return bad("comments go to the upstream repository " + options.upstream_repo + " only, not " + r.repo());
      if (r.comment().issue_number() <= 0) return bad("issue_number must be positive");
      return absl::OkStatus();
    case v1::GitHubRequest::kSuiteRerun:
      if (!upstream) return bad("suite re-runs are of the upstream repository " + options.upstream_repo + " only, not " + r.repo());
      if (r.suite_rerun().check_suite_id() <= 0) return bad("check_suite_id must be positive");
      return absl::OkStatus();
    case v1::GitHubRequest::CALL_NOT_SET:
      break;
  }
  return bad("no call");
}

}  // namespace relay::dispatch
