// relay-intake: GitHub webhooks in, durable in Kafka.
//   relay-intake [--config FILE] [--port-file FILE]
// Every setting can also come from RELAY_* environment variables (see
// deploy/config/intake.example.yaml). Runs until SIGTERM/SIGINT, then drains.
#include "relay/intake/intake_service.h"
#include "relay/service/host.h"

int main(int argc, char** argv) { return relay::service::Main(argc, argv, relay::intake::Definition()); }
