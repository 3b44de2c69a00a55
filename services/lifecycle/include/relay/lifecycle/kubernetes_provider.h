// The `kubernetes` provider: clusters as Kubernetes objects, through the
// API server's REST API (bearer token, TLS with the cluster's CA).
//
// Kind `command`: one Pod per node (`<node id>`, restartPolicy Never, the
// group's argv in the configured image, the group's resources as requests
// and limits). Jobs: one Pod per job (`<cluster>-<job>`, `/bin/sh -c
// <entrypoint>`), its log copied to the job's log file when it ends.
// Kind `ray`: one KubeRay `RayCluster` (`ray.io/v1`, name = cluster id) per
// cluster, created when the head node starts, worker groups' replicas
// patched (JSON patch) as worker nodes start and stop; readiness from the
// RayCluster's status (state `ready`, readyWorkerReplicas). Ray jobs run as
// a Pod calling `ray job submit` against the head's service. Token
// authentication for Ray: KubernetesOptions::ray_auth.
//
// Every object carries the labels app.kubernetes.io/managed-by=relay-lifecycle,
// relay.dev/owner=<owner>, relay.dev/cluster-id and relay.dev/node-id or
// relay.dev/job-id (the inventory is one LIST by label), and the annotation
// relay.dev/leader-epoch is not written (the controller's epoch rule guards
// its state; objects are named deterministically, so a second create is a
// 409 that is treated as done once the object is confirmed to be the
// cluster's). Transport errors and 5xx leave a node as it was (unknown is
// not dead); 404 means gone.
//
// Not here: watches (state comes from GET/LIST each pass, not a watch
// cache with 410 handling), and exclusive acting on the host level
// (Acquire is a no-op: two leaders can only overlap through Kafka).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "relay/lifecycle/provider.h"

namespace relay::lifecycle {

struct KubernetesOptions {
  std::string api_url;      // https://host:port; empty: in-cluster (KUBERNETES_SERVICE_HOST/PORT)
  std::string token_file;   // empty: in-cluster service account token
  std::string ca_file;      // empty with in-cluster: the service account's ca.crt
  std::string namespace_;   // empty: in-cluster namespace, else "default"
  std::string image = "debian:12-slim";            // command nodes and jobs
  std::string ray_image = "rayproject/ray:2.60.0";  // Ray nodes and Ray job submitters
  std::string owner = "relay-lifecycle";
  std::string log_dir;      // job logs are copied here (<log_dir>/<cluster>/job-<id>.log)
  // Ray clusters' dashboard and Jobs API: "token" asks KubeRay for token
  // authentication (spec.authOptions) with strict field validation, so an
  // operator whose CRD has no authOptions (KubeRay 1.5 and older) refuses
  // the RayCluster (422) instead of silently running it open; "none" runs
  // Ray clusters without it (only where NetworkPolicies keep everyone else
  // away from the Ray pods; relay logs a warning at start).
  std::string ray_auth = "token";
};

absl::StatusOr<std::unique_ptr<NodeProvider>> NewKubernetesProvider(KubernetesOptions options);

}  // namespace relay::lifecycle
