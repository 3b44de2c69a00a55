// relay-lifecycle: the cluster lifecycle service, and a CLI for its API.
//   relay-lifecycle [--config FILE] [--port-file FILE]     serve
//   relay-lifecycle ctl [--addr HOST:PORT] [--token-file F] [--ca F [--cert F --key F]] COMMAND ...
// Every setting of the service can also come from RELAY_* environment
// variables (see deploy/config/lifecycle.example.yaml). The CLI reads
// LIFECYCLE_GRPC (address) and LIFECYCLE_TOKEN (bearer token) when the
// flags are not given (`tools/dev status` prints both for the dev stack).
#include <grpcpp/ext/proto_server_reflection_plugin.h>

#include <cstring>

#include "relay/lifecycle/ctl.h"
#include "relay/lifecycle/lifecycle_service.h"
#include "relay/service/host.h"

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "ctl") == 0) return relay::lifecycle::CtlMain(argc - 2, argv + 2);
  // Server reflection on every gRPC server this process builds.
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  return relay::service::Main(argc, argv, relay::lifecycle::Definition());
}
