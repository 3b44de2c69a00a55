// relay-lifecycle: the cluster lifecycle service.
//   relay-lifecycle [--config FILE] [--port-file FILE]     serve
// Every setting of the service can also come from RELAY_* environment
// variables (see deploy/config/lifecycle.example.yaml). Its API from a
// shell is `relayctl clusters` (tools/relayctl), which reads
// LIFECYCLE_GRPC (address) and LIFECYCLE_TOKEN (bearer token) when its
// flags are not given (`tools/dev status` prints both for the dev stack).
#include <grpcpp/ext/proto_server_reflection_plugin.h>

#include <cstring>
#include <iostream>

#include "relay/lifecycle/lifecycle_service.h"
#include "relay/service/host.h"

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "ctl") == 0) {
    // The CLI that lived here is relayctl's now: say where, not just "unknown argument".
    std::cerr << "relay-lifecycle: `relay-lifecycle ctl` is now `relayctl clusters` (same commands and flags)\n";
    return 2;
  }
  // Server reflection on every gRPC server this process builds.
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  return relay::service::Main(argc, argv, relay::lifecycle::Definition());
}
