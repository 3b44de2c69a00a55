// relay-lifecycle: creates, watches and garbage-collects the clusters CI
// runs on, behind an authenticated gRPC API (grpc_api.h), with its state in
// Kafka (controller.h) and one active reconciler at a time (leader.h).
#pragma once

#include <chrono>
#include <string>

#include "absl/status/statusor.h"
#include "relay/auth/oidc.h"
#include "relay/base/config.h"
#include "relay/kafka/producer.h"
#include "relay/lifecycle/controller.h"
#include "relay/lifecycle/grpc_api.h"
#include "relay/lifecycle/kubernetes_provider.h"
#include "relay/service/service.h"

namespace relay::lifecycle {

struct LifecycleSettings {
  kafka::ProducerOptions kafka;
  std::string group_id = "relay-lifecycle";        // the leader election's group
  std::chrono::milliseconds leader_session_timeout{6000};
  std::string grpc_listen = "127.0.0.1:7070";
  std::string provider = "local";                  // local | kubernetes
  KubernetesOptions kubernetes;                    // lifecycle.kubernetes.*
  std::string tokens_file;                         // service tokens (hashed)
  auth::OidcSettings oidc;                         // lifecycle.oidc.*, lifecycle.providers_file
  std::vector<auth::OidcCallerRule> oidc_allow;     // lifecycle.oidc.allow: who may call with OIDC, as which team
  TlsOptions tls;
  std::string pools_file;
  std::string state_dir;                           // local provider: logs, work dirs, lock
  std::string owner = "relay-lifecycle";           // the label on everything the provider starts
  std::string runtime_dir;                         // local provider: where owners are claimed host-wide
  std::string local_team;                          // local provider: its one team (no uid range)
  std::string local_run_as;                        // ... and the user its jobs run as (required as root)
  std::string ray_temp_root;                       // local provider: Ray's temp root (empty: /tmp/rr)
  int64_t uid_first = 0, uid_last = 0;             // local provider: teams' uids (lifecycle.local.uid_range)
  std::string ray_bin;                             // local provider: `ray` of a venv with ray[default]
  std::string leader_topic = "lifecycle.leader";
  std::string webhooks_topic = "github.webhooks";  // runner pools read workflow_job from here
  ControllerOptions controller;
};

absl::StatusOr<LifecycleSettings> LoadSettings(Config& config);

service::Definition Definition();

}  // namespace relay::lifecycle
