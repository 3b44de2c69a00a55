// Test double for kafka::Producer. Records every Send; in kAuto mode it
// acknowledges at once, in kManual mode the test decides when and how each
// record is acknowledged (to prove nothing is answered before the broker
// ack). With a FakeBroker, acknowledged records are appended to it.
#pragma once

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "relay/kafka/producer.h"
#include "relay/kafka/testing/fake_broker.h"

namespace relay::kafka::testing {

class FakeProducer final : public Producer {
 public:
  enum class Mode { kAuto, kManual };
  explicit FakeProducer(Mode mode = Mode::kAuto, FakeBroker* broker = nullptr) : mode_(mode), broker_(broker) {}

  void Send(Record record, DeliveryCallback done) override { SendImpl(std::move(record), std::move(done), nullptr); }
  // With a broker, the offset it gave the record (-1 without one).
  void SendReported(Record record, OffsetCallback done) override {
    auto offset = std::make_shared<int64_t>(-1);
    SendImpl(
        std::move(record),
        [offset, done = std::move(done)](absl::Status s) mutable { std::move(done)(std::move(s), *offset); }, offset);
  }

  void SendImpl(Record record, DeliveryCallback done, std::shared_ptr<int64_t> offset) {
    std::unique_lock lock(mu_);
    sent_.push_back(record);
    if (mode_ == Mode::kAuto) {
      const absl::Status& set = [&]() -> const absl::Status& {
        auto it = topic_status_.find(record.topic);
        return it != topic_status_.end() ? it->second : auto_status_;
      }();
      // A fresh Status, not a copy: a copy shares its message with the one
      // stored here, and its reference count lives in the uninstrumented
      // absl library, so TSan would see a test replacing the stored status
      // as a race with the copy's reader.
      absl::Status s(set.code(), set.message());
      // Payloads (kafka::FencedError's mark) are copied too.
      set.ForEachPayload([&s](absl::string_view url, const absl::Cord& payload) { s.SetPayload(url, payload); });
      lock.unlock();
      Ack(record, s, std::move(done), offset.get());
      return;
    }
    pending_.push_back(Pending{std::move(record), std::move(done), std::move(offset)});
  }
  absl::Status Flush(std::chrono::milliseconds) override { return absl::OkStatus(); }
  bool Connected() const override { return connected_; }

  // kManual: completes the oldest pending Send with `status`; false if none.
  bool CompleteNext(absl::Status status) {
    Pending next;
    {
      std::lock_guard lock(mu_);
      if (pending_.empty()) return false;
      next = std::move(pending_.front());
      pending_.pop_front();
    }
    Ack(next.record, std::move(status), std::move(next.done), next.offset.get());
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
  // kAuto: the status every Send gets (OK by default)...
  void set_auto_status(absl::Status s) {
    std::lock_guard lock(mu_);
    auto_status_ = std::move(s);
  }
  // ...or, for records of `topic`, this one.
  void set_topic_status(const std::string& topic, absl::Status s) {
    std::lock_guard lock(mu_);
    topic_status_[topic] = std::move(s);
  }
  void set_connected(bool c) { connected_ = c; }

 private:
  struct Pending {
    Record record;
    DeliveryCallback done;
    std::shared_ptr<int64_t> offset;
  };
  void Ack(const Record& record, absl::Status status, DeliveryCallback done, int64_t* offset) {
    if (status.ok() && broker_) {
      if (record.partition >= 0) {
        auto appended = broker_->AppendTo(record.partition, record);
        if (!appended.ok()) status = appended.status();
        else if (offset) *offset = *appended;
      } else {
        auto appended = broker_->Append(record);
        if (!appended.ok()) status = appended.status();
        else if (offset) *offset = appended->second;
      }
    }
    std::move(done)(std::move(status));
  }

  Mode mode_;
  FakeBroker* broker_;
  mutable std::mutex mu_;
  std::vector<Record> sent_;
  std::deque<Pending> pending_;
  absl::Status auto_status_;
  std::map<std::string, absl::Status> topic_status_;
  std::atomic<bool> connected_ = true;
};

// A Producer that forwards to one the test owns, for factories that must
// hand out a unique_ptr (service::Factories) while the test keeps control.
class BorrowedProducer final : public Producer {
 public:
  explicit BorrowedProducer(Producer* target) : target_(target) {}
  void Send(Record record, DeliveryCallback done) override { target_->Send(std::move(record), std::move(done)); }
  void SendReported(Record record, OffsetCallback done) override {
    target_->SendReported(std::move(record), std::move(done));
  }
  absl::Status Flush(std::chrono::milliseconds timeout) override { return target_->Flush(timeout); }
  bool Connected() const override { return target_->Connected(); }

 private:
  Producer* target_;
};

}  // namespace relay::kafka::testing
