// relay-noop-server: the ceiling for the intake benchmark. The same HTTP
// stack as relay-intake (relay::http::Server on Beast/Asio, same thread
// count), reading each request body in full and answering 202 without
// verifying or producing anything.
//   relay-noop-server --port-file FILE [--threads N]
#include <fstream>
#include <iostream>

#include "relay/base/signals.h"
#include "relay/http/router.h"
#include "relay/http/server.h"

int main(int argc, char** argv) {
  relay::BlockShutdownSignals();
  std::string port_file;
  relay::http::ServerOptions options;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--port-file") port_file = argv[i + 1];
    else if (a == "--threads") options.threads = std::stoi(argv[i + 1]);
    else if (a == "--port") options.port = static_cast<uint16_t>(std::stoi(argv[i + 1]));
  }
  relay::http::Router router;
  router.Add(boost::beast::http::verb::post, "/github/webhook", [](relay::http::Request&&, relay::http::Responder r) {
    r.Send(relay::http::MakeResponse(202, R"({"status":"accepted"})"));
  }, options.body_limit);
  options.body_limit_for = router.AsBodyLimitFunction();
  prometheus::Registry registry;
  auto server = relay::http::Server::Start(options, router.AsHandler(), &registry);
  if (!server.ok()) {
    std::cerr << server.status() << "\n";
    return 1;
  }
  if (!port_file.empty()) std::ofstream(port_file) << (*server)->port() << "\n";
  relay::WaitForShutdownSignal();
  (*server)->Shutdown(std::chrono::seconds(5));
  return 0;
}
