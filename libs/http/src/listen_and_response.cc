// The server's two stand-alone helpers: a listen address's parse, and a
// response built from a status and a body (server.h declares both).
#include <charconv>

#include "relay/http/server.h"

namespace relay::http {

namespace bhttp = boost::beast::http;

absl::Status ParseListenAddress(std::string_view listen, ServerOptions* options) {
  auto colon = listen.rfind(':');
  uint32_t port = 0;
  const char* end = listen.data() + listen.size();
  if (colon == std::string_view::npos || colon == 0 ||
      std::from_chars(listen.data() + colon + 1, end, port).ptr != end || colon + 1 == listen.size() ||
      port > 65535) {
    return absl::InvalidArgumentError("listen address '" + std::string(listen) + "' is not host:port");
  }
  options->host = std::string(listen.substr(0, colon));
  options->port = static_cast<uint16_t>(port);
  return absl::OkStatus();
}

Response MakeResponse(unsigned status, std::string body, std::string_view content_type) {
  Response response{static_cast<bhttp::status>(status), 11};
  response.set(bhttp::field::content_type, content_type);
  response.body() = std::move(body);
  return response;
}

}  // namespace relay::http
