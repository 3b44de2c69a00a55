// Ack, SendAndWait: blocking on one record's acknowledgement (producer.h).
#include <condition_variable>
#include <mutex>

#include "relay/kafka/producer.h"

namespace relay::kafka {

struct Ack::State {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  absl::Status status;
  int64_t offset = -1;

  void Set(absl::Status s, int64_t o) {
    std::lock_guard lock(mu);
    status = std::move(s);
    offset = o;
    done = true;
    cv.notify_all();
  }
};

Ack::Ack() : state_(std::make_shared<State>()) {}

std::function<void(absl::Status)> Ack::Callback() {
  return [state = state_](absl::Status s) { state->Set(std::move(s), -1); };
}

std::function<void(absl::Status, int64_t)> Ack::OffsetCallback() {
  return [state = state_](absl::Status s, int64_t offset) { state->Set(std::move(s), offset); };
}

absl::StatusOr<int64_t> Ack::Wait(std::optional<std::chrono::milliseconds> timeout) {
  std::unique_lock lock(state_->mu);
  if (timeout) {
    if (!state_->cv.wait_for(lock, *timeout, [this] { return state_->done; })) {
      return absl::UnavailableError("not acknowledged within " + std::to_string(timeout->count()) + " ms");
    }
  } else {
    state_->cv.wait(lock, [this] { return state_->done; });
  }
  if (!state_->status.ok()) return state_->status;
  return state_->offset;
}

absl::Status SendAndWait(Producer& producer, Record record, std::optional<std::chrono::milliseconds> timeout) {
  Ack ack;
  producer.Send(std::move(record), ack.Callback());
  return ack.Wait(timeout).status();
}

absl::StatusOr<int64_t> SendAndWaitForOffset(Producer& producer, Record record,
                                             std::optional<std::chrono::milliseconds> timeout) {
  Ack ack;
  producer.SendReported(std::move(record), ack.OffsetCallback());
  return ack.Wait(timeout);
}

}  // namespace relay::kafka
