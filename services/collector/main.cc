// relay-collector: downstream CI results in (OIDC-authenticated callbacks
// bound to relay dispatches), the job state machine, results out.
//   relay-collector [--config FILE] [--port-file FILE]
// Every setting can also come from RELAY_* environment variables (see
// deploy/config/collector.example.yaml). Runs until SIGTERM/SIGINT, then drains.
#include "relay/collector/collector_service.h"
#include "relay/service/host.h"

int main(int argc, char** argv) { return relay::service::Main(argc, argv, relay::collector::Definition()); }
