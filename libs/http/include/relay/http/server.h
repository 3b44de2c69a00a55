// HTTP/1.1 server on Boost.Beast/Asio for every relay service.
//
// - keep-alive, pipelining-safe (one request at a time per connection)
// - body limit checked against Content-Length before the body is read (413)
// - header_timeout bounds an idle keep-alive connection and the time to read
//   the request line and headers; body_timeout bounds reading the body. A
//   slow or truncated client is cut off, never holds a thread: all I/O is
//   asynchronous: `threads` event loops of one thread each, every connection
//   pinned to one loop; accepting runs on a loop of its own.
// - answers "Expect: 100-continue" once the headers passed the limits
// - Shutdown(): stop accepting, close idle connections, let requests in
//   flight finish (their responses carry Connection: close), then stop.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <boost/beast/http.hpp>

#include "absl/status/statusor.h"
#include "prometheus/registry.h"

namespace relay::http {

using Request = boost::beast::http::request<boost::beast::http::string_body>;
using Response = boost::beast::http::response<boost::beast::http::string_body>;

class Session;

// Sends the one response to one request. Move-only. Call Send exactly once,
// from any thread; a Responder dropped unsent answers 500 (a bug, logged).
// The Server must outlive every Responder.
class Responder {
 public:
  explicit Responder(std::shared_ptr<Session> session);
  Responder(Responder&&) noexcept;
  Responder& operator=(Responder&&) noexcept;
  Responder(const Responder&) = delete;
  Responder& operator=(const Responder&) = delete;
  ~Responder();

  void Send(Response response);

 private:
  std::shared_ptr<Session> session_;
};

using Handler = std::function<void(Request&&, Responder)>;

struct ServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;  // 0: the kernel picks; see Server::port()
  int threads = 2;  // event loops (one thread each), plus one accepting thread
  uint64_t body_limit = 25 * 1024 * 1024;
  std::chrono::milliseconds header_timeout{10'000};
  std::chrono::milliseconds body_timeout{30'000};
};

// Parses a listen address "host:port" (port 0-65535; 0 lets the kernel
// pick) into options->host and options->port. Every service's http.listen.
absl::Status ParseListenAddress(std::string_view listen, ServerOptions* options);

// Builds a response with a body and content type; keep-alive is set by the server.
Response MakeResponse(unsigned status, std::string body,
                      std::string_view content_type = "application/json");

class Server {
 public:
  // Binds and starts serving. `handler` is called on a server thread with a
  // complete request; it must not block (hand work off, answer later).
  static absl::StatusOr<std::unique_ptr<Server>> Start(ServerOptions options, Handler handler,
                                                       prometheus::Registry* metrics);
  virtual ~Server() = default;
  virtual uint16_t port() const = 0;
  virtual bool draining() const = 0;
  // Idempotent. Returns once every connection closed or `deadline` passed.
  virtual void Shutdown(std::chrono::milliseconds deadline) = 0;
};

}  // namespace relay::http
