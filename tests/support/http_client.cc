#include "support/http_client.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <functional>

#include <poll.h>

namespace relay::testing {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = net::ip::tcp;

HttpClient::HttpClient(std::string host, uint16_t port, std::chrono::milliseconds timeout)
    : host_(std::move(host)), port_(port), timeout_(timeout) {}

HttpClient::~HttpClient() = default;

bool HttpClient::Connect(std::string* error) {
  stream_ = std::make_unique<beast::tcp_stream>(ioc_);
  beast::error_code ec;
  stream_->expires_after(timeout_);
  stream_->socket().connect(tcp::endpoint(net::ip::make_address(host_), port_), ec);
  if (ec) {
    *error = "connect: " + ec.message();
    stream_.reset();
    return false;
  }
  return true;
}

// True when the server closed (or reset) the kept-alive connection: with no
// request outstanding, anything readable on it is the end of the stream.
bool PeerClosed(tcp::socket& socket) {
  pollfd pfd{socket.native_handle(), POLLIN | POLLRDHUP, 0};
  return ::poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLIN | POLLRDHUP | POLLHUP | POLLERR));
}

HttpResult HttpClient::Request(bhttp::verb method, const std::string& target,
                               const std::map<std::string, std::string>& headers, const std::string& body) {
  HttpResult result;
  // Only requests that are safe to repeat are ever sent twice. A POST goes
  // out once: a kept-alive connection is checked before it is used, and an
  // error after sending is the result, so a test never counts one request
  // as two (or a request the server dropped as answered).
  bool idempotent = method == bhttp::verb::get || method == bhttp::verb::head;
  if (stream_ && PeerClosed(stream_->socket())) stream_.reset();
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (!stream_ && !Connect(&result.error)) return result;
    bhttp::request<bhttp::string_body> req{method, target, 11};
    req.set(bhttp::field::host, host_);
    for (const auto& [k, v] : headers) req.set(k, v);
    req.body() = body;
    req.prepare_payload();
    req.keep_alive(true);
    beast::error_code ec;
    // Run the async ops with a deadline: the stream's timer cancels them.
    stream_->expires_after(timeout_);
    bhttp::async_write(*stream_, req, [&](beast::error_code e, size_t) { ec = e; });
    ioc_.restart();
    ioc_.run();
    beast::flat_buffer buffer;
    bhttp::response_parser<bhttp::string_body> parser;
    parser.body_limit(64 * 1024 * 1024);
    if (!ec) {
      stream_->expires_after(timeout_);
      bhttp::async_read(*stream_, buffer, parser, [&](beast::error_code e, size_t) { ec = e; });
      ioc_.restart();
      ioc_.run();
    }
    if (ec) {
      stream_.reset();
      // A keep-alive connection the server closed meanwhile: retry once on a
      // fresh connection. Any other error is the result.
      if (idempotent && attempt == 0 &&
          (ec == bhttp::error::end_of_stream || ec == net::error::connection_reset ||
           ec == net::error::broken_pipe)) {
        continue;
      }
      result.error = ec.message();
      return result;
    }
    auto res = parser.release();
    result.status = res.result_int();
    result.body = res.body();
    for (const auto& f : res) {
      std::string name(f.name_string());
      for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      result.headers[name] = std::string(f.value());
    }
    if (!res.keep_alive()) stream_.reset();
    return result;
  }
  return result;
}

std::string RawExchange(const std::string& host, uint16_t port, const std::string& bytes,
                        std::chrono::milliseconds timeout) {
  net::io_context ioc;
  beast::tcp_stream stream(ioc);
  beast::error_code ec;
  stream.socket().connect(tcp::endpoint(net::ip::make_address(host), port), ec);
  if (ec) return "";
  net::write(stream.socket(), net::buffer(bytes), ec);
  std::string out;
  char buf[4096];
  stream.expires_after(timeout);
  std::function<void()> read_more = [&] {
    stream.async_read_some(net::buffer(buf), [&](beast::error_code e, size_t n) {
      out.append(buf, n);
      if (!e) read_more();
    });
  };
  read_more();
  ioc.run();
  return out;
}

double MetricValue(uint16_t port, const std::string& sample) {
  std::string m = "\n" + HttpClient("127.0.0.1", port).Get("/metrics").body;
  auto at = m.find("\n" + sample + " ");
  return at == std::string::npos ? 0 : std::stod(m.substr(at + sample.size() + 2));
}

}  // namespace relay::testing
