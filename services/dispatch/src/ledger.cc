#include "relay/dispatch/ledger.h"

#include "absl/strings/numbers.h"

#include "relay/base/log.h"
#include "relay/base/status.h"

namespace relay::dispatch {

namespace {

// The id of an input partition's handled mark (never a request id: those
// are digests).
std::string MarkId(const kafka::TopicPartition& input) {
  return "handled:" + input.topic + "/" + std::to_string(input.partition);
}

}  // namespace

absl::Status CheckWithinLedgerMemory(int64_t event_unix_ms, int64_t now_unix_ms, int64_t ledger_retention_ms) {
  if (ledger_retention_ms <= 0) return absl::OkStatus();
  const int64_t bound = ledger_retention_ms - std::chrono::milliseconds(kLedgerMargin).count();
  const int64_t age = now_unix_ms - event_unix_ms;
  if (age < bound) return absl::OkStatus();
  return absl::FailedPreconditionError(
      "the record is " + std::to_string(age / 3'600'000) + " h old, past the " + std::to_string(bound / 3'600'000) +
      " h the dispatch ledger is sure to remember (its retention less " +
      std::to_string(std::chrono::hours(kLedgerMargin).count()) +
      " h): acted on again, it could repeat GitHub writes already made");
}

absl::StatusOr<int64_t> RetentionMs(const kafka::TopicDescription& topic) {
  auto config = [&](const std::string& key) {
    auto it = topic.configs.find(key);
    return it == topic.configs.end() ? std::string() : it->second;
  };
  if (config("cleanup.policy").find("delete") == std::string::npos) return 0;
  int64_t ms = 0;
  if (!absl::SimpleAtoi(config("retention.ms"), &ms)) {
    return absl::InvalidArgumentError("topic " + topic.name + ": retention.ms '" + config("retention.ms") +
                                      "' is not a number");
  }
  return ms < 0 ? 0 : ms;
}

absl::Status Ledger::Load(const std::vector<kafka::TopicPartition>& inputs) {
  for (const auto& input : inputs) {
    std::map<std::string, State> states;
    int64_t handled = 0;
    const std::string mark = MarkId(input);
    auto end = reader_->ReadToEnd(topic_, {LedgerPartition(input)}, [&](const kafka::ConsumedRecord& r) {
      v1::LedgerEntry e;
      if (!e.ParseFromString(r.value)) {
        log::Warn("undecodable ledger entry skipped", {{"partition", r.partition}, {"offset", r.offset}});
        return absl::OkStatus();
      }
      if (e.input_topic() != input.topic) return absl::OkStatus();
      if (e.handled_through_offset() > 0) {
        // Another input partition sharing this ledger partition has its own.
        if (e.request_id() == mark) handled = std::max(handled, e.handled_through_offset());
        return absl::OkStatus();
      }
      // A later entry of an id replaces the earlier one (compaction keeps
      // only the latest anyway).
      states[e.request_id()] = e.state();
      return absl::OkStatus();
    });
    if (!end.ok()) return absl::UnavailableError("ledger " + topic_ + ": " + std::string(end.status().message()));
    size_t n = states.size();
    {
      std::lock_guard lock(mu_);
      states_[input] = std::move(states);
      handled_[input] = handled;
    }
    log::Info("ledger loaded", {{"input", input.topic + "/" + std::to_string(input.partition)},
                                {"entries", static_cast<int64_t>(n)},
                                {"handled_through", handled}});
  }
  return absl::OkStatus();
}

void Ledger::Drop(const std::vector<kafka::TopicPartition>& inputs) {
  std::lock_guard lock(mu_);
  for (const auto& input : inputs) {
    states_.erase(input);
    handled_.erase(input);
  }
}

int64_t Ledger::HandledThrough(const kafka::TopicPartition& input) const {
  std::lock_guard lock(mu_);
  auto it = handled_.find(input);
  return it == handled_.end() ? 0 : it->second;
}

absl::Status Ledger::MarkHandled(const kafka::TopicPartition& input, int64_t next_offset) {
  if (next_offset <= HandledThrough(input)) return absl::OkStatus();
  v1::LedgerEntry e;
  e.set_request_id(MarkId(input));
  e.set_at_unix_ms(clock_->UnixMillis());
  e.set_input_topic(input.topic);
  e.set_handled_through_offset(next_offset);
  RELAY_RETURN_IF_ERROR(kafka::SendAndWait(*producer_, kafka::MessageRecord(topic_, e.request_id(), e, "", LedgerPartition(input))));
  std::lock_guard lock(mu_);
  // Only for partitions still owned, and never backwards.
  if (auto it = handled_.find(input); it != handled_.end()) it->second = std::max(it->second, next_offset);
  return absl::OkStatus();
}

Ledger::State Ledger::Get(const kafka::TopicPartition& input, const std::string& request_id) const {
  std::lock_guard lock(mu_);
  auto p = states_.find(input);
  if (p == states_.end()) return v1::LedgerEntry::STATE_UNSPECIFIED;
  auto it = p->second.find(request_id);
  return it == p->second.end() ? v1::LedgerEntry::STATE_UNSPECIFIED : it->second;
}

kafka::Record Ledger::Entry(const kafka::TopicPartition& input, const v1::GitHubRequest& request, State state) const {
  v1::LedgerEntry e;
  e.set_request_id(request.id());
  e.set_state(state);
  e.set_at_unix_ms(clock_->UnixMillis());
  e.set_repo(request.repo());
  e.set_delivery_id(request.delivery_id());
  e.set_input_topic(input.topic);
  return kafka::MessageRecord(topic_, request.id(), e, request.delivery_id(), LedgerPartition(input));
}

void Ledger::Remember(const kafka::TopicPartition& input, const std::string& id, State state) {
  std::lock_guard lock(mu_);
  // Only for partitions still owned: a late write for one taken away is
  // the new owner's to read from the topic.
  if (auto p = states_.find(input); p != states_.end()) p->second[id] = state;
}

absl::Status Ledger::Put(const kafka::TopicPartition& input, const v1::GitHubRequest& request, State state) {
  kafka::Producer& p = state == v1::LedgerEntry::STARTED ? *started_ : *producer_;
  absl::Status s = kafka::SendAndWait(p, Entry(input, request, state));
  if (s.ok()) Remember(input, request.id(), state);
  return s;
}

void Ledger::PutAsync(const kafka::TopicPartition& input, const v1::GitHubRequest& request, State state,
                      std::function<void(absl::Status)> done) {
  producer_->Send(Entry(input, request, state), [this, input, id = request.id(), state,
                                                 done = std::move(done)](absl::Status s) {
    if (s.ok()) Remember(input, id, state);
    done(std::move(s));
  });
}

size_t Ledger::size() const {
  std::lock_guard lock(mu_);
  size_t n = 0;
  for (const auto& [tp, m] : states_) n += m.size();
  return n;
}

}  // namespace relay::dispatch
