// What an upstream webhook asks of GitHub: a pure function from one
// github.webhooks record (and the allowlist in force) to the writes to make
// and the facts to publish. No I/O, so every event rule is unit-tested on
// real payloads.
//
//   pull_request opened/reopened/synchronize/closed/labeled, push  -> one
//       repository_dispatch per allowlisted repo (every level) whose
//       subscription asks for it (allowlist.h: by default the four PR
//       actions and push, any labels); a repo that would have had it by
//       default and does not ask for it is listed in Plan::filtered
//   pull_request labeled/unlabeled with ciflow/crcr/<device> (and any PR
//       event carrying such labels) -> a PullRequestLabels fact
//   check_run rerequested on a relay check run (crcr/<owner>/<repo>/...,
//       made by this app) -> re-run the failed jobs of the downstream run
//   check_suite rerequested -> the same for every relay check run of the suite
//   anything else, or another repository's events -> ignored, with the reason
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <boost/json/object.hpp>

#include "absl/status/statusor.h"
#include "relay/allowlist/allowlist.h"
#include "relay/auth/relay_token.h"
#include "relay/github/check_runs.h"
#include "relay/github/event_time.h"
#include "relay/v1/dispatch.pb.h"
#include "relay/v1/github.pb.h"
#include "relay/v1/webhook.pb.h"

namespace relay::dispatch {

// GitHub's limit on a repository_dispatch request body.
inline constexpr size_t kMaxDispatchBytes = 64 * 1024;

struct PlannerOptions {
  std::string upstream_repo;   // only this repository's events are relayed
  std::string app_id;          // relay check runs are this app's
  int64_t token_ttl_seconds = 7 * 24 * 3600;
};

struct Plan {
  std::vector<v1::GitHubRequest> requests;
  std::optional<v1::PullRequestLabels> labels;
  // Set when the record asks for nothing: the event name, or why.
  std::string ignored;
  // Dispatches the default subscription would have made and the repo's own
  // does not ask for: (repo, reason), reason "event" (not this event or
  // action) or "label" (the PR carries none of its labels).
  std::vector<std::pair<std::string, std::string>> filtered;
};

// InvalidArgument (poison) for a record that cannot be decoded or lacks a
// field its event needs.
absl::StatusOr<Plan> PlanWebhook(const v1::WebhookRecord& record, const allowlist::Allowlist& allowlist,
                                 const auth::RelayTokenKeys& tokens, const PlannerOptions& options,
                                 int64_t now_unix_ms);

// Whether a request read from github.requests may be carried out: that
// topic is a write channel to GitHub for whoever can produce to it, so
// every request is held to what relay itself asks for. Dispatches and
// re-runs go to allowlisted (downstream) repos only; check runs, comments
// and suite re-runs to the upstream repo only; every value that becomes a
// path segment or query of the API call is checked (repo names as GitHub
// allows them, a 40- or 64-hex head sha, positive ids). InvalidArgument
// with the reason otherwise (the record goes to the DLQ with it).
absl::Status ValidateRequest(const v1::GitHubRequest& request, const allowlist::Allowlist& allowlist,
                             const PlannerOptions& options);

// The client_payload of a dispatch, slimmed when the whole request would
// exceed GitHub's 64 KB: exposed for tests.
struct ClientPayload {
  std::string request_json;  // {"event_type":..., "client_payload": {...}}
  bool slimmed = false;
};
ClientPayload BuildDispatchBody(const std::string& event, const std::string& delivery_id,
                                const std::string& payload_json, const std::string& relay_token);

// The time of a pull_request event (its label fact's order): the payload's
// pull_request.updated_at, else intake's received_at; received_at orders
// two events of one second. Exposed for tests.
github::EventTime EventTimeOf(const v1::WebhookRecord& record, const boost::json::object* pull_request);

// Shared with the collector (libs/github/check_runs.h).
using github::CheckRunName;
using github::CheckRunRef;
using github::ParseCheckRun;
using github::RequestId;

}  // namespace relay::dispatch
