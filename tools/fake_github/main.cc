// relay-fake-github: the fake GitHub REST API (fake_github.h) as a process.
//   relay-fake-github [--listen HOST:PORT] [--port-file FILE] [--app-id ID]
//                     [--public-key PEM_FILE] [--record JSONL_FILE]
//                     [--deliver-to INTAKE_WEBHOOK_URL --webhook-secret SECRET]
// Runs until SIGTERM/SIGINT.
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>

#include "fake_github.h"
#include "relay/base/log.h"
#include "relay/base/signals.h"
#include "relay/http/server.h"

int main(int argc, char** argv) {
  relay::BlockShutdownSignals();
  relay::fake_github::Options options;
  std::string port_file;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string_view a = argv[i];
    std::string v = argv[i + 1];
    if (a == "--listen") {
      relay::http::ServerOptions so;
      if (!relay::http::ParseListenAddress(v, &so).ok()) {
        std::cerr << "bad --listen " << v << "\n";
        return 2;
      }
      options.host = so.host;
      options.port = so.port;
    } else if (a == "--port-file") {
      port_file = v;
    } else if (a == "--app-id") {
      options.app_id = v;
    } else if (a == "--public-key") {
      std::ifstream in(v);
      std::stringstream text;
      text << in.rdbuf();
      options.public_key_pem = text.str();
    } else if (a == "--record") {
      options.record_file = v;
    } else if (a == "--deliver-to") {
      options.deliver_to = v;
    } else if (a == "--webhook-secret") {
      options.webhook_secret = v;
    } else {
      std::cerr << "relay-fake-github: unknown argument " << a << "\n";
      return 2;
    }
  }
  auto fake = relay::fake_github::FakeGitHub::Start(options);
  if (!fake.ok()) {
    relay::log::Error("fake github did not start", {{"error", std::string(fake.status().message())}});
    return 1;
  }
  relay::log::Info("fake github listening", {{"port", (*fake)->port()}, {"app_id", options.app_id}});
  if (!port_file.empty()) {
    std::string tmp = port_file + ".tmp";
    std::ofstream(tmp) << (*fake)->port() << "\n";
    std::rename(tmp.c_str(), port_file.c_str());
  }
  relay::WaitForShutdownSignal();
  (*fake)->Stop();
  return 0;
}
