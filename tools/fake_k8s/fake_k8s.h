// A fake of the Kubernetes API server, for relay-lifecycle's `kubernetes`
// provider: the few endpoints it calls, with the API server's own answers
// (201 on create, 409 AlreadyExists, 404 NotFound as `Status` objects,
// label selectors, resourceVersion), every call recorded, and knobs to make
// it misbehave. There is no kubelet and no KubeRay operator behind it: pods
// and RayClusters stay as created until a test moves them (or `auto_run`
// makes new pods Running and Ready, new RayClusters ready).
//
//   pods         POST/GET(list)/DELETE(collection) /api/v1/namespaces/{ns}/pods,
//                GET/DELETE /api/v1/namespaces/{ns}/pods/{name}, GET .../{name}/log
//   rayclusters  POST/GET(list) /apis/ray.io/v1/namespaces/{ns}/rayclusters,
//                GET/DELETE/PATCH (json-patch: replace) .../rayclusters/{name}
//   auth         `Authorization: Bearer <token>` must equal Options::token (else 401)
//   control      POST /_fake/pods/{ns}/{name}   {"phase", "ready", "exitCode", "log"}
//                POST /_fake/rayclusters/{ns}/{name} {"state", "readyWorkerReplicas"}
//                POST /_fake/faults {"method", "path" (regex), "status", "count"}
//                GET  /_fake/calls  [{"method", "path", "status"}...]
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace relay::fake_k8s {

struct Options {
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  std::string token = "fake-k8s-token";
  bool auto_run = false;  // new pods Running+Ready, new RayClusters ready at once
};

class FakeKubernetes {
 public:
  static absl::StatusOr<std::unique_ptr<FakeKubernetes>> Start(Options options);
  virtual ~FakeKubernetes() = default;
  virtual uint16_t port() const = 0;
  virtual void Stop() = 0;
};

}  // namespace relay::fake_k8s
