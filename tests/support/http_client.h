// A blocking HTTP/1.1 client for tests: one keep-alive connection, with a
// per-request timeout. Reconnects when the server closed the connection
// before a request; never sends a POST twice.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>

namespace relay::testing {

struct HttpResult {
  int status = 0;  // 0: no response (connection error or timeout)
  std::string error;
  std::string body;
  std::map<std::string, std::string> headers;  // lower-case names
};

class HttpClient {
 public:
  HttpClient(std::string host, uint16_t port, std::chrono::milliseconds timeout = std::chrono::seconds(30));
  ~HttpClient();
  HttpResult Request(boost::beast::http::verb method, const std::string& target,
                     const std::map<std::string, std::string>& headers, const std::string& body);
  HttpResult Post(const std::string& target, const std::map<std::string, std::string>& headers,
                  const std::string& body) {
    return Request(boost::beast::http::verb::post, target, headers, body);
  }
  HttpResult Get(const std::string& target) { return Request(boost::beast::http::verb::get, target, {}, ""); }

 private:
  bool Connect(std::string* error);

  std::string host_;
  uint16_t port_;
  std::chrono::milliseconds timeout_;
  boost::asio::io_context ioc_;
  std::unique_ptr<boost::beast::tcp_stream> stream_;
};

// Sends raw bytes on a fresh connection, then reads until the server closes
// or `timeout`; returns what came back (for malformed-request tests).
std::string RawExchange(const std::string& host, uint16_t port, const std::string& bytes,
                        std::chrono::milliseconds timeout);

// A sample's value from a service's /metrics, e.g.
// MetricValue(port, "relay_x_total{outcome=\"ok\"}"); 0 when absent.
double MetricValue(uint16_t port, const std::string& sample);

}  // namespace relay::testing
