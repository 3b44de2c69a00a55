#include "relay/http/client.h"

#include <poll.h>

#include <algorithm>

#include <optional>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

namespace relay::http {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
namespace ssl = net::ssl;
using tcp = net::ip::tcp;

const std::string& ClientResponse::Header(const std::string& lower_name) const {
  static const std::string kEmpty;
  auto it = headers.find(lower_name);
  return it == headers.end() ? kEmpty : it->second;
}

namespace {

struct Origin {
  bool tls = false;
  std::string host;
  std::string port;
  std::string prefix;  // no trailing slash
};

absl::StatusOr<Origin> ParseOrigin(const std::string& url) {
  Origin o;
  std::string_view rest = url;
  if (rest.rfind("https://", 0) == 0) {
    o.tls = true;
    rest.remove_prefix(8);
  } else if (rest.rfind("http://", 0) == 0) {
    rest.remove_prefix(7);
  } else {
    return absl::InvalidArgumentError("'" + url + "' is not an http:// or https:// URL");
  }
  auto slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  if (slash != std::string_view::npos) o.prefix = std::string(rest.substr(slash));
  while (!o.prefix.empty() && o.prefix.back() == '/') o.prefix.pop_back();
  auto colon = authority.rfind(':');
  if (colon != std::string_view::npos && authority.find(']') == std::string_view::npos) {
    o.host = std::string(authority.substr(0, colon));
    o.port = std::string(authority.substr(colon + 1));
  } else {
    o.host = std::string(authority);
    o.port = o.tls ? "443" : "80";
  }
  if (o.host.empty() || o.port.empty()) return absl::InvalidArgumentError("'" + url + "' has no host");
  return o;
}

class ClientImpl final : public Client {
 public:
  ClientImpl(Origin origin, ClientOptions options) : origin_(std::move(origin)), options_(std::move(options)) {}

  absl::Status Init() {
    if (!origin_.tls) return absl::OkStatus();
    ssl_.emplace(ssl::context::tls_client);
    beast::error_code ec;
    if (options_.ca_file.empty()) {
      ssl_->set_default_verify_paths(ec);
    } else {
      ssl_->load_verify_file(options_.ca_file, ec);
    }
    if (ec) return absl::InvalidArgumentError("TLS trust store: " + ec.message());
    ssl_->set_verify_mode(ssl::verify_peer);
    return absl::OkStatus();
  }

  absl::StatusOr<ClientResponse> Send(bhttp::verb method, const std::string& target,
                                      const std::map<std::string, std::string>& headers,
                                      std::string_view body) override {
    if (connected_ && PeerClosed()) Reset();
    if (!connected_) {
      if (absl::Status s = Connect(); !s.ok()) {
        Reset();
        return s;
      }
    }
    // span_body: the body is written from the caller's buffer, not copied.
    bhttp::request<bhttp::span_body<const char>> req{method, origin_.prefix + target, 11};
    req.set(bhttp::field::host, origin_.host);
    req.set(bhttp::field::user_agent, options_.user_agent);
    for (const auto& [k, v] : headers) req.set(k, v);
    req.body() = {body.data(), body.size()};
    req.keep_alive(true);
    req.prepare_payload();

    beast::error_code ec;
    bhttp::response_parser<bhttp::string_body> parser;
    parser.body_limit(options_.max_response_bytes);
    Lowest().expires_after(Within(options_.request_timeout));
    auto read_response = [&](auto& stream) {
      bhttp::async_write(stream, req, [&](beast::error_code e, size_t) {
        ec = e;
        if (!e) bhttp::async_read(stream, buffer_, parser, [&](beast::error_code e2, size_t) { ec = e2; });
      });
    };
    if (tls_) {
      read_response(*tls_);
    } else {
      read_response(*plain_);
    }
    ioc_.restart();
    ioc_.run();
    if (ec) {
      Reset();
      // The request may have reached the server: its effect is unknown.
      return absl::UnavailableError(std::string(bhttp::to_string(method)) + " " + target +
                                    ": after sending: " + ec.message());
    }
    auto res = parser.release();
    ClientResponse out;
    out.status = res.result_int();
    out.body = std::move(res.body());
    for (const auto& f : res) {
      std::string name(f.name_string());
      for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      out.headers[name] = std::string(f.value());
    }
    if (!res.keep_alive()) Reset();
    return out;
  }

  void SetDeadline(std::optional<std::chrono::steady_clock::time_point> deadline) override { deadline_ = deadline; }

  void Reset() override {
    beast::error_code ec;
    if (plain_) plain_->socket().close(ec);
    if (tls_) beast::get_lowest_layer(*tls_).socket().close(ec);
    plain_.reset();
    tls_.reset();
    buffer_.clear();
    connected_ = false;
  }

 private:
  // `timeout`, or what is left until the deadline if that is sooner (at
  // least 1 ms: a timer that already expired still ends the step).
  std::chrono::milliseconds Within(std::chrono::milliseconds timeout) const {
    if (!deadline_) return timeout;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline_ - std::chrono::steady_clock::now());
    return std::max(std::chrono::milliseconds(1), std::min(timeout, left));
  }

  beast::tcp_stream& Lowest() { return tls_ ? beast::get_lowest_layer(*tls_) : *plain_; }

  // With no request outstanding, anything readable on an idle kept-alive
  // connection is the server closing it.
  bool PeerClosed() {
    pollfd pfd{Lowest().socket().native_handle(), POLLIN | POLLRDHUP, 0};
    return ::poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLIN | POLLRDHUP | POLLHUP | POLLERR));
  }

  absl::Status Connect() {
    beast::error_code ec;
    tcp::resolver resolver(ioc_);
    tcp::resolver::results_type endpoints;
    net::steady_timer deadline(ioc_);
    deadline.expires_after(Within(options_.connect_timeout));
    bool resolved = false;
    resolver.async_resolve(origin_.host, origin_.port, [&](beast::error_code e, tcp::resolver::results_type r) {
      ec = e;
      endpoints = std::move(r);
      resolved = true;
      deadline.cancel();
    });
    deadline.async_wait([&](beast::error_code e) {
      if (!e && !resolved) resolver.cancel();
    });
    ioc_.restart();
    ioc_.run();
    if (ec) return absl::UnavailableError("resolve " + origin_.host + ": " + ec.message());
    if (origin_.tls) {
      tls_ = std::make_unique<beast::ssl_stream<beast::tcp_stream>>(ioc_, *ssl_);
      // SNI, and the certificate must name the host.
      if (!SSL_set_tlsext_host_name(tls_->native_handle(), origin_.host.c_str())) {
        return absl::UnavailableError("TLS: cannot set the server name");
      }
      tls_->set_verify_callback(ssl::host_name_verification(origin_.host));
    } else {
      plain_ = std::make_unique<beast::tcp_stream>(ioc_);
    }
    Lowest().expires_after(Within(options_.connect_timeout));
    Lowest().async_connect(endpoints, [&](beast::error_code e, const tcp::endpoint&) { ec = e; });
    ioc_.restart();
    ioc_.run();
    if (ec) return absl::UnavailableError("connect " + origin_.host + ":" + origin_.port + ": " + ec.message());
    beast::error_code nodelay;
    Lowest().socket().set_option(tcp::no_delay(true), nodelay);
    if (tls_) {
      tls_->async_handshake(ssl::stream_base::client, [&](beast::error_code e) { ec = e; });
      ioc_.restart();
      ioc_.run();
      if (ec) return absl::UnavailableError("TLS handshake with " + origin_.host + ": " + ec.message());
    }
    connected_ = true;
    return absl::OkStatus();
  }

  Origin origin_;
  ClientOptions options_;
  net::io_context ioc_;
  std::optional<ssl::context> ssl_;
  std::unique_ptr<beast::tcp_stream> plain_;
  std::unique_ptr<beast::ssl_stream<beast::tcp_stream>> tls_;
  beast::flat_buffer buffer_;
  bool connected_ = false;
  std::optional<std::chrono::steady_clock::time_point> deadline_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Client>> Client::New(const std::string& origin, ClientOptions options) {
  auto parsed = ParseOrigin(origin);
  if (!parsed.ok()) return parsed.status();
  auto client = std::make_unique<ClientImpl>(std::move(*parsed), std::move(options));
  if (absl::Status s = client->Init(); !s.ok()) return s;
  return std::unique_ptr<Client>(std::move(client));
}

}  // namespace relay::http
