// relay-intake: GitHub webhooks in, durable in Kafka.
//   relay-intake [--config FILE] [--port-file FILE]
// Every setting can also come from RELAY_* environment variables (see
// services/intake/README.md). Runs until SIGTERM/SIGINT, then drains.
#include <cstring>
#include <fstream>
#include <iostream>

#include "intake_service.h"
#include "relay/base/log.h"
#include "relay/base/signals.h"

int main(int argc, char** argv) {
  relay::BlockShutdownSignals();
  std::string config_path, port_file;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if ((arg == "--config" || arg == "--port-file") && i + 1 < argc) {
      (arg == "--config" ? config_path : port_file) = argv[++i];
    } else if (arg == "--help" || arg == "-h") {
      std::cout << "usage: relay-intake [--config FILE] [--port-file FILE]\n";
      return 0;
    } else {
      std::cerr << "relay-intake: unknown argument " << arg << "\n";
      return 2;
    }
  }
  auto config = relay::Config::Load(config_path, relay::Config::ProcessEnvironment());
  if (!config.ok()) {
    relay::log::Error("bad configuration", {{"error", std::string(config.status().message())}});
    return 2;
  }
  auto settings = relay::intake::LoadSettings(*config);
  if (!settings.ok()) {
    relay::log::Error("bad configuration", {{"error", std::string(settings.status().message())}});
    return 2;
  }
  relay::log::Level level;
  relay::log::ParseLevel(settings->log_level, &level);
  relay::log::SetLevel(level);

  auto service = relay::intake::IntakeService::Start(std::move(*settings));
  if (!service.ok()) {
    relay::log::Error("start failed", {{"error", std::string(service.status().message())}});
    return 1;
  }
  if (!port_file.empty()) {
    // Written only once we listen, so a launcher can wait for it.
    std::string tmp = port_file + ".tmp";
    std::ofstream(tmp) << (*service)->port() << "\n";
    std::rename(tmp.c_str(), port_file.c_str());
  }
  int sig = relay::WaitForShutdownSignal();
  relay::log::Info("shutdown signal", {{"signal", strsignal(sig)}});
  bool clean = (*service)->Shutdown();
  service->reset();
  return clean ? 0 : 1;
}
