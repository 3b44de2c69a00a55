// HTTP/1.1 client for calls out of relay (the GitHub REST API, ClickHouse):
// one keep-alive connection to one origin, plain or TLS (certificate and
// host name verified against the system's CA bundle), every step under a
// deadline. Boost.Beast has the protocol; this adds the connection reuse,
// the deadlines and our error model. Not thread-safe: one per worker.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <boost/beast/http/verb.hpp>

#include "absl/status/statusor.h"

namespace relay::http {

struct ClientOptions {
  std::chrono::milliseconds connect_timeout{5'000};
  // From writing the request to the end of the response.
  std::chrono::milliseconds request_timeout{30'000};
  std::string user_agent = "relay";
  // PEM bundle of trusted CAs for https; empty: the system's default paths.
  std::string ca_file;
  uint64_t max_response_bytes = 64 * 1024 * 1024;
};

struct ClientResponse {
  unsigned status = 0;
  std::map<std::string, std::string> headers;  // names lower-case
  std::string body;

  // The header's value, or "" when absent.
  const std::string& Header(const std::string& lower_name) const;
};

class Client {
 public:
  // `origin`: "http://host:port" or "https://host[:port]", optionally with
  // a path prefix ("https://ghe.example.com/api/v3") that every target is
  // appended to. InvalidArgument for anything else.
  static absl::StatusOr<std::unique_ptr<Client>> New(const std::string& origin, ClientOptions options = {});
  virtual ~Client() = default;

  // Sends one request and reads its response. A stale kept-alive connection
  // is replaced before sending; a request is never sent twice.
  // Errors: Unavailable for transport failures and timeouts, with
  // "after sending" in the message when the request may have reached the
  // server (its effect is then unknown); DeadlineExceeded is not used.
  // `body` is sent from the caller's memory, not copied (a ClickHouse
  // insert is tens of MB); it must stay valid until Send returns.
  virtual absl::StatusOr<ClientResponse> Send(boost::beast::http::verb method, const std::string& target,
                                              const std::map<std::string, std::string>& headers,
                                              std::string_view body) = 0;
  // Closes the connection (the next Send opens a new one).
  virtual void Reset() = 0;
  // The Sends that follow end by `deadline`, connecting included (each
  // step still within its own timeout); nullopt (the default) lifts it. A
  // caller with a budget of its own (a page's) passes its deadline.
  virtual void SetDeadline(std::optional<std::chrono::steady_clock::time_point> deadline) = 0;
};

}  // namespace relay::http
