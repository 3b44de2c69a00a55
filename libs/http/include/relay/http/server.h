// HTTP/1.1 server on Boost.Beast/Asio for every relay service.
//
// - keep-alive, pipelining-safe (one request at a time per connection)
// - limits checked before the body is read: the route's body limit against
//   Content-Length (413), the server-wide budget of body bytes being
//   received (503 + Retry-After), the connection cap (503 + Retry-After)
// - deadlines: header_timeout for a new connection's first request line and
//   headers, idle_timeout for a keep-alive connection waiting for its next
//   request, body_timeout for reading a body and writing a response,
//   handler_timeout for a request held by its handler (then 503 +
//   Retry-After; a later answer from the handler is dropped). A slow or
//   silent client is cut off and never holds a thread: all I/O is
//   asynchronous on `threads` event loops of one thread each, every
//   connection pinned to one loop; accepting runs on a loop of its own.
// - answers "Expect: 100-continue" once the headers passed the limits
// - Shutdown(): stop accepting, close idle connections, let requests in
//   flight finish (their responses carry Connection: close), then stop.
//   A service's two-phase drain (readiness off first, listener later) is
//   the service skeleton's job (libs/service), not this class's.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <variant>
#include <memory>
#include <string>

#include <boost/beast/http.hpp>

#include "absl/status/statusor.h"
#include "prometheus/registry.h"

namespace relay::http {

using Request = boost::beast::http::request<boost::beast::http::string_body>;
using Response = boost::beast::http::response<boost::beast::http::string_body>;

// Where the response to one request goes: a connection of the server, or a
// test's capture (http/testing/capture.h). Thread-safe.
class ResponseSink {
 public:
  virtual ~ResponseSink() = default;
  // Delivers the response to request number `seq` of this sink. A response
  // for a request that was already answered (by the handler deadline) is
  // dropped.
  virtual void Respond(uint64_t seq, Response response) = 0;
};

// Sends the one response to one request. Move-only. Call Send exactly once,
// from any thread; a Responder dropped unsent answers 500 (a bug, logged).
// The Server must outlive every Responder.
class Responder {
 public:
  Responder(std::shared_ptr<ResponseSink> sink, uint64_t seq);
  Responder(Responder&&) noexcept;
  Responder& operator=(Responder&&) noexcept;
  Responder(const Responder&) = delete;
  Responder& operator=(const Responder&) = delete;
  ~Responder();

  void Send(Response response);

 private:
  std::shared_ptr<ResponseSink> sink_;
  uint64_t seq_ = 0;
};

using Handler = std::function<void(Request&&, Responder)>;

// Uploads too large to hold whole (a test report of a million cases): the
// route gets the request header first, then the body piece by piece as it
// arrives, then the end. Memory is what the route keeps, not the body.
using RequestHeader = boost::beast::http::request_header<>;

class BodyStream {
 public:
  virtual ~BodyStream() = default;
  // The next piece of the body, in order, on the connection's I/O thread
  // (keep it short). An error stops the upload: the client is answered
  // with StatusToHttp(error) and the message, and the rest is not read.
  virtual absl::Status OnData(std::string_view data) = 0;
  // The whole body arrived: answer through `responder` (from any thread,
  // within http.handler_timeout). Not called when the upload failed; the
  // stream is then just released.
  virtual void OnEnd(Responder responder) = 0;
};

// Called on the I/O thread once the header is in: a stream to take the
// body, or a response that refuses the upload before any of it is read
// (bad credentials).
using StreamHandler = std::function<std::variant<Response, std::shared_ptr<BodyStream>>(const RequestHeader&)>;
// The stream handler of a request, or nullptr for an ordinary one.
using StreamHandlerFunction =
    std::function<const StreamHandler*(boost::beast::http::verb, std::string_view target)>;

// HTTP status for a stream's refusal: InvalidArgument 400, Unauthenticated
// 401, PermissionDenied 403, NotFound 404, DeadlineExceeded 408,
// ResourceExhausted 413, Unavailable 503, else 500.
unsigned StatusToHttp(const absl::Status& status);
// The body limit for a request, from its method and target (the router's
// per-route limits); never above ServerOptions::body_limit.
using BodyLimitFunction = std::function<uint64_t(boost::beast::http::verb, std::string_view target)>;

struct ServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;  // 0: the kernel picks; see Server::port()
  int threads = 2;    // event loops (one thread each), plus one accepting thread
  // The largest body any route takes; `body_limit_for` narrows it per route.
  uint64_t body_limit = 25 * 1024 * 1024;
  BodyLimitFunction body_limit_for;
  // Routes whose bodies are streamed (BodyStream) rather than read whole.
  // Their bodies do not count against max_body_bytes_in_flight (nothing
  // is held) and may exceed body_limit up to their route's own limit.
  StreamHandlerFunction stream_for;
  std::chrono::milliseconds header_timeout{10'000};
  // Longer than the idle timeout of any balancer in front (AWS ALB 60 s,
  // nginx upstream keepalive 60 s), so the balancer, not the server, closes
  // an idle connection and never sends on one the server just closed.
  std::chrono::milliseconds idle_timeout{75'000};
  std::chrono::milliseconds body_timeout{30'000};
  std::chrono::milliseconds handler_timeout{15'000};
  int64_t max_connections = 10'000;
  // Bytes of request bodies being received (declared Content-Length, or
  // chunks so far) before their handler took them: what unauthenticated
  // senders can make the server hold.
  int64_t max_body_bytes_in_flight = 256 * 1024 * 1024;
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
  // Idempotent. Returns once every connection closed or `deadline` passed:
  // true if every connection closed in time, false if some were cut off
  // (a request still held by its handler lost its answer).
  virtual bool Shutdown(std::chrono::milliseconds deadline) = 0;
};

}  // namespace relay::http
