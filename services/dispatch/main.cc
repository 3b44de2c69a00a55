// relay-dispatch: upstream webhooks out to downstream repositories as
// repository_dispatch events; the suite's one GitHub writer.
//   relay-dispatch [--config FILE] [--port-file FILE]
// Every setting can also come from RELAY_* environment variables (see
// deploy/config/dispatch.example.yaml). Runs until SIGTERM/SIGINT, then drains.
#include "relay/dispatch/dispatch_service.h"
#include "relay/service/host.h"

int main(int argc, char** argv) { return relay::service::Main(argc, argv, relay::dispatch::Definition()); }
