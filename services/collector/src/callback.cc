#include "relay/collector/callback.h"

#include <boost/json.hpp>

#include "absl/strings/ascii.h"
#include "relay/base/json_fields.h"
#include "relay/github/check_runs.h"

namespace relay::collector {
namespace {

namespace json = boost::json;

absl::Status Bad(std::string reason) { return absl::InvalidArgumentError(std::move(reason)); }

// A field that must be a string (or absent/null when `required` is false),
// at most kMaxNameBytes, written "workflow.<key>" in reasons.
absl::StatusOr<std::string> Field(const json::object& o, std::string_view where, std::string_view key, bool required,
                                  size_t max = kMaxNameBytes) {
  const json::value* v = o.if_contains(key);
  if (!v || v->is_null()) {
    if (required) return Bad(std::string(where) + std::string(key) + " is required");
    return std::string();
  }
  if (!v->is_string()) return Bad(std::string(where) + std::string(key) + " must be a string");
  if (v->as_string().size() > max) {
    return Bad(std::string(where) + std::string(key) + " is longer than " + std::to_string(max) + " bytes");
  }
  if (required && v->as_string().empty()) return Bad(std::string(where) + std::string(key) + " is empty");
  return std::string(v->as_string());
}

// run_id and run_attempt: strings of digits as the action sends them (a
// JSON number is taken too).
absl::StatusOr<std::string> Digits(const json::object& o, std::string_view key, bool positive) {
  const json::value* v = o.if_contains(key);
  std::string s;
  if (v && v->is_int64() && v->as_int64() >= 0) {
    s = std::to_string(v->as_int64());
  } else if (v && v->is_uint64()) {
    s = std::to_string(v->as_uint64());
  } else if (v && v->is_string()) {
    s = std::string(v->as_string());
  } else {
    return Bad("workflow." + std::string(key) + " is required (a string of digits)");
  }
  if (s.empty() || s.size() > 20 || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return Bad("workflow." + std::string(key) + " must be a string of digits");
  }
  if (positive && s.find_first_not_of('0') == std::string::npos) return Bad("workflow." + std::string(key) + " must be at least 1");
  return s;
}

absl::StatusOr<int64_t> Count(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  if (!v || v->is_null()) return 0;
  if (v->is_int64() && v->as_int64() >= 0) return v->as_int64();
  if (v->is_uint64() && v->as_uint64() < (1ULL << 62)) return static_cast<int64_t>(v->as_uint64());
  return Bad("workflow.test_results." + std::string(key) + " must be a non-negative integer");
}

bool IsHexSha(std::string_view s) {
  return s.size() == 40 && std::all_of(s.begin(), s.end(), [](char c) { return absl::ascii_isxdigit(c); });
}

// Upstream repo, PR number and head sha from the echoed payload (whole or
// slimmed: dispatch keeps these fields either way).
void FromPayload(const json::object& payload, v1::CallbackRequest& r) {
  r.set_upstream_repo(std::string(StringField(ObjectField(payload, "repository"), "full_name")));
  const json::object* pr = ObjectField(payload, "pull_request");
  const json::value* number = payload.if_contains("number");
  if (number && number->is_int64()) r.set_pr_number(number->as_int64());
  else if (pr && pr->if_contains("number") && pr->at("number").is_int64()) r.set_pr_number(pr->at("number").as_int64());
  std::string sha = pr ? std::string(StringField(ObjectField(*pr, "head"), "sha")) : "";
  if (sha.empty()) sha = std::string(StringField(payload, "after"));
  if (sha.empty()) sha = std::string(StringField(ObjectField(payload, "head_commit"), "id"));
  r.set_head_sha(sha);
}

}  // namespace

bool IsConclusion(std::string_view c) {
  for (const char* known : {"success", "failure", "cancelled", "skipped", "timed_out", "neutral", "action_required", "stale"}) {
    if (c == known) return true;
  }
  return false;
}

std::string JobId(const v1::CallbackRequest& r) {
  return github::RequestId({"job", r.delivery_id(), absl::AsciiStrToLower(std::string(r.repo())), r.workflow().run_id(),
                            r.workflow().run_attempt(), r.workflow().job_name()});
}

absl::StatusOr<ParsedCallback> ParseCallback(std::string_view body) {
  if (body.size() > kMaxCallbackBytes) return Bad("body is larger than " + std::to_string(kMaxCallbackBytes) + " bytes");
  boost::system::error_code ec;
  json::value doc = json::parse(json::string_view(body.data(), body.size()), ec);
  if (ec) return Bad("body is not JSON: " + ec.message());
  if (!doc.is_object()) return Bad("body is not a JSON object");
  const json::object& o = doc.as_object();
  ParsedCallback out;
  v1::CallbackRequest& r = out.request;

  auto event_type = Field(o, "", "event_type", true, 100);
  if (!event_type.ok()) return event_type.status();
  r.set_event_type(*event_type);
  out.self_report = *event_type == "nightly" || *event_type == "periodic";
  auto delivery = Field(o, "", "delivery_id", true, 200);
  if (!delivery.ok()) return delivery.status();
  r.set_delivery_id(*delivery);
  if (out.self_report && !IsHexSha(*delivery)) return Bad("delivery_id of a " + *event_type + " report must be the upstream commit sha");
  auto token = Field(o, "", "relay_token", false, 4096);
  if (!token.ok()) return token.status();
  out.relay_token = *token;
  if (const json::value* p = o.if_contains("payload"); p && !p->is_null()) {
    if (!p->is_object()) return Bad("payload must be an object");
    FromPayload(p->as_object(), r);
  }
  if (out.self_report) {
    // One commit, one spelling: the sha is the job's delivery id.
    r.set_delivery_id(absl::AsciiStrToLower(*delivery));
    r.set_head_sha(r.delivery_id());
  }

  const json::object* w = ObjectField(o, "workflow");
  if (!w) return Bad("workflow is required (an object)");
  const json::value* version = w->if_contains("schema_version");
  if (!version || !((version->is_string() && version->as_string() == "1") || (version->is_int64() && version->as_int64() == 1))) {
    return Bad("workflow.schema_version must be \"1\"");
  }
  v1::WorkflowReport& wf = *r.mutable_workflow();
  auto status = Field(*w, "workflow.", "status", true, 32);
  if (!status.ok()) return status.status();
  if (*status != "in_progress" && *status != "completed") return Bad("workflow.status must be in_progress or completed");
  wf.set_status(*status);
  if (out.self_report && *status != "completed") return Bad(*event_type + " reports are accepted with status completed only");
  auto conclusion = Field(*w, "workflow.", "conclusion", false, 32);
  if (!conclusion.ok()) return conclusion.status();
  if (*status == "in_progress" && !conclusion->empty()) return Bad("workflow.conclusion must be null while in_progress");
  if (*status == "completed" && !IsConclusion(*conclusion)) {
    return Bad("workflow.conclusion must be one of success, failure, cancelled, skipped, timed_out, neutral, "
               "action_required, stale when completed");
  }
  wf.set_conclusion(*conclusion);
  auto run_id = Digits(*w, "run_id", true);
  if (!run_id.ok()) return run_id.status();
  wf.set_run_id(*run_id);
  auto attempt = Digits(*w, "run_attempt", true);
  if (!attempt.ok()) return attempt.status();
  wf.set_run_attempt(*attempt);
  using Setter = void (*)(v1::WorkflowReport&, std::string);
  const std::tuple<const char*, bool, Setter> fields[] = {
      {"job_name", true, [](v1::WorkflowReport& x, std::string v) { x.set_job_name(std::move(v)); }},
      {"name", false, [](v1::WorkflowReport& x, std::string v) { x.set_name(std::move(v)); }},
      {"url", false, [](v1::WorkflowReport& x, std::string v) { x.set_url(std::move(v)); }},
      {"check_run_id", false, [](v1::WorkflowReport& x, std::string v) { x.set_check_run_id(std::move(v)); }},
      {"started_at", false, [](v1::WorkflowReport& x, std::string v) { x.set_started_at(std::move(v)); }},
      {"completed_at", false, [](v1::WorkflowReport& x, std::string v) { x.set_completed_at(std::move(v)); }},
      {"artifact_url", false, [](v1::WorkflowReport& x, std::string v) { x.set_artifact_url(std::move(v)); }},
  };
  for (const auto& [key, required, set] : fields) {
    auto v = Field(*w, "workflow.", key, required, std::string_view(key).ends_with("url") ? 2048 : kMaxNameBytes);
    if (!v.ok()) return v.status();
    set(wf, std::move(*v));
  }
  if (const json::value* t = w->if_contains("test_results"); t && !t->is_null()) {
    if (!t->is_object()) return Bad("workflow.test_results must be an object");
    const json::object& tr = t->as_object();
    auto passed = Count(tr, "passed"), failed = Count(tr, "failed"), skipped = Count(tr, "skipped"), total = Count(tr, "total");
    for (auto* c : {&passed, &failed, &skipped, &total}) {
      if (!c->ok()) return c->status();
    }
    wf.set_has_test_results(true);
    wf.set_tests_passed(*passed);
    wf.set_tests_failed(*failed);
    wf.set_tests_skipped(*skipped);
    wf.set_tests_total(*total > 0 ? *total : *passed + *failed + *skipped);
    if (const json::value* f = tr.if_contains("failed_tests"); f && f->is_array()) {
      for (const auto& name : f->as_array()) {
        if (static_cast<size_t>(wf.failed_tests_size()) >= kMaxFailedTests) break;
        if (name.is_string()) wf.add_failed_tests(std::string(name.as_string().subview(0, std::min<size_t>(name.as_string().size(), kMaxNameBytes))));
      }
    }
  }
  return out;
}

}  // namespace relay::collector
