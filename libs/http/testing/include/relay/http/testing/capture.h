// Unit tests of HTTP handlers without a server: a Responder whose response
// is captured, and a way to wait for it (a handler may answer later, from a
// Kafka callback's thread).
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include "relay/http/server.h"

namespace relay::http::testing {

class CapturedResponse final : public ResponseSink {
 public:
  void Respond(uint64_t, Response response) override {
    std::lock_guard lock(mu_);
    ++count_;
    if (!response_) response_ = std::move(response);
    cv_.notify_all();
  }
  // The response, once there is one.
  std::optional<Response> response() const {
    std::lock_guard lock(mu_);
    return response_;
  }
  // 0 before the handler answered; must never exceed 1.
  int count() const {
    std::lock_guard lock(mu_);
    return count_;
  }
  bool WaitFor(std::chrono::milliseconds timeout) const {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [this] { return count_ > 0; });
  }
  unsigned status() const {
    std::lock_guard lock(mu_);
    return response_ ? response_->result_int() : 0;
  }

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::optional<Response> response_;
  int count_ = 0;
};

// A Responder for one request and the capture it answers into.
inline std::pair<Responder, std::shared_ptr<CapturedResponse>> CaptureResponder() {
  auto capture = std::make_shared<CapturedResponse>();
  return {Responder(capture, 1), capture};
}

}  // namespace relay::http::testing
