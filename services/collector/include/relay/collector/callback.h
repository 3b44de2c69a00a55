// The callback body, as the public `cross-repo-ci-relay-callback` action
// posts it: the dispatch's client payload echoed whole ({event_type,
// delivery_id, payload, relay_token, ...}) plus a `workflow` object. Parsing
// and validation only: who the caller is comes from its OIDC token, never
// from here.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "relay/v1/collector.pb.h"

namespace relay::collector {

// Upper bounds on what a callback may carry (GitHub caps a client payload
// at 64 KB; the workflow object is small).
inline constexpr size_t kMaxCallbackBytes = 256 * 1024;
inline constexpr size_t kMaxFailedTests = 200;
inline constexpr size_t kMaxNameBytes = 512;

struct ParsedCallback {
  // event_type, delivery_id, upstream_repo, pr_number, head_sha and
  // workflow filled in; identity, token and relay-token fields are not.
  v1::CallbackRequest request;
  std::string relay_token;  // "" when the body has none
  bool self_report = false;  // event_type nightly | periodic: no dispatch behind it
};

// InvalidArgument with a reason the caller can act on ("workflow.status
// must be in_progress or completed") for anything malformed.
absl::StatusOr<ParsedCallback> ParseCallback(std::string_view body);

// True for the conclusions GitHub Actions gives a job (and a check run takes).
bool IsConclusion(std::string_view conclusion);

// The job's identity: hex SHA-256 of delivery, repo (lower-cased), run id,
// attempt and job name.
std::string JobId(const v1::CallbackRequest& request);

}  // namespace relay::collector
