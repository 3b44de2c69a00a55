// relay-collector as a service of the host (libs/service): takes downstream
// CI callbacks (POST /github/callback), checks who sends them (OIDC), what
// they may report (allowlist level, relay token, rate), and has the owner
// of the repository's partition decide them against the job state machine.
//
// The path of one callback:
//   any instance: verify, then produce a CallbackRequest to ci.callbacks
//     (key: the repo as the allowlist writes it, so relay.dispatches and
//     ci.callbacks put a repo in the same partition) and wait;
//   the partition's owner (consumer group over ci.callbacks and
//     relay.dispatches, range assignment): decide (jobs.h), make the job
//     state (collector.state), the result (ci.results) and any check run
//     (github.requests) durable, then answer on collector.decisions;
//   the receiving instance (it follows collector.decisions): answers the
//     caller with the owner's status.
// One owner per repo serializes its jobs, so two instances racing on the
// same job's callbacks can never both accept it.
#pragma once

#include <chrono>
#include <string>

#include "absl/status/statusor.h"
#include "relay/auth/oidc.h"
#include "relay/base/config.h"
#include "relay/collector/test_reports.h"
#include "relay/kafka/producer.h"
#include "relay/service/service.h"

namespace relay::collector {

struct Topics {
  std::string callbacks = "ci.callbacks";
  std::string decisions = "collector.decisions";
  std::string state = "collector.state";
  std::string results = "ci.results";
  std::string dispatches = "relay.dispatches";
  std::string labels = "relay.pr_labels";
  std::string github_requests = "github.requests";
  std::string test_reports = "ci.test_reports";
};

struct CollectorSettings {
  kafka::ProducerOptions kafka;
  std::string group_id = "relay-collector";
  std::chrono::milliseconds session_timeout{45'000};
  Topics topics;
  std::string allowlist_file;
  std::chrono::milliseconds allowlist_reload{10'000};
  std::string token_keys_file;
  // The GitHub Actions issuer (collector.oidc.*) and any others
  // (collector.providers_file).
  auth::OidcSettings oidc;
  // Legacy: accept callbacks without a relay token (downstream workflows
  // built for the reference relay, which had none). Off by default.
  bool allow_missing_relay_token = false;
  std::chrono::milliseconds zombie_timeout{6 * 3600 * 1000};
  std::chrono::milliseconds sweep_interval{60'000};
  // Dispatches, used tokens and completed jobs are remembered this long
  // (longer than a relay token lives).
  std::chrono::milliseconds history{10LL * 24 * 3600 * 1000};
  double rate_per_repo = 20;   // callbacks per second per repo, sustained
  double burst_per_repo = 400; // ... and in a burst (a matrix reports at once)
  std::chrono::milliseconds decision_timeout{10'000};
  size_t batch_records = 2'000;
  ReportSettings reports;  // test-report uploads (test_reports.h)
  std::string grpc_listen;  // "host:port" of the gRPC API; "" leaves it off
};

absl::StatusOr<CollectorSettings> LoadSettings(Config& config, const service::CommonSettings& common);

service::Definition Definition();

}  // namespace relay::collector
