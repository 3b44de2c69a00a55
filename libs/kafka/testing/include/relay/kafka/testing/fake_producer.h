// Test double for kafka::Producer. Records every Send; in kAuto mode it
// acknowledges at once with `auto_status`, in kManual mode the test decides
// when and how each record is acknowledged (to prove nothing is answered
// before the broker ack).
#pragma once

#include <deque>
#include <mutex>
#include <vector>

#include "relay/kafka/producer.h"

namespace relay::kafka::testing {

class FakeProducer final : public Producer {
 public:
  enum class Mode { kAuto, kManual };
  explicit FakeProducer(Mode mode = Mode::kAuto) : mode_(mode) {}

  void Send(Record record, DeliveryCallback done) override {
    std::unique_lock lock(mu_);
    sent_.push_back(record);
    if (mode_ == Mode::kAuto) {
      absl::Status s = auto_status_;
      lock.unlock();
      std::move(done)(s);
      return;
    }
    pending_.push_back(std::move(done));
  }
  absl::Status Flush(std::chrono::milliseconds) override { return absl::OkStatus(); }
  bool Connected() const override { return connected_; }

  // kManual: completes the oldest pending Send with `status`; false if none.
  bool CompleteNext(absl::Status status) {
    DeliveryCallback done;
    {
      std::lock_guard lock(mu_);
      if (pending_.empty()) return false;
      done = std::move(pending_.front());
      pending_.pop_front();
    }
    std::move(done)(std::move(status));
    return true;
  }
  size_t pending() const {
    std::lock_guard lock(mu_);
    return pending_.size();
  }
  std::vector<Record> sent() const {
    std::lock_guard lock(mu_);
    return sent_;
  }
  void set_auto_status(absl::Status s) {
    std::lock_guard lock(mu_);
    auto_status_ = std::move(s);
  }
  void set_connected(bool c) { connected_ = c; }

 private:
  Mode mode_;
  mutable std::mutex mu_;
  std::vector<Record> sent_;
  std::deque<DeliveryCallback> pending_;
  absl::Status auto_status_;
  bool connected_ = true;
};

}  // namespace relay::kafka::testing
