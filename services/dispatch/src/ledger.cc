#include "relay/dispatch/ledger.h"

#include <future>

#include "relay/base/log.h"

namespace relay::dispatch {

absl::Status SendAndWait(kafka::Producer* producer, kafka::Record record) {
  auto acked = std::make_shared<std::promise<absl::Status>>();
  auto future = acked->get_future();
  producer->Send(std::move(record), [acked](absl::Status s) { acked->set_value(std::move(s)); });
  return future.get();
}

absl::Status Ledger::Load(const std::vector<kafka::TopicPartition>& inputs) {
  for (const auto& input : inputs) {
    std::map<std::string, State> states;
    auto end = reader_->ReadToEnd(topic_, {LedgerPartition(input)}, [&](const kafka::ConsumedRecord& r) {
      v1::LedgerEntry e;
      if (!e.ParseFromString(r.value)) {
        log::Warn("undecodable ledger entry skipped", {{"partition", r.partition}, {"offset", r.offset}});
        return absl::OkStatus();
      }
      if (e.input_topic() != input.topic) return absl::OkStatus();
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
    }
    log::Info("ledger loaded", {{"input", input.topic + "/" + std::to_string(input.partition)},
                                {"entries", static_cast<int64_t>(n)}});
  }
  return absl::OkStatus();
}

void Ledger::Drop(const std::vector<kafka::TopicPartition>& inputs) {
  std::lock_guard lock(mu_);
  for (const auto& input : inputs) states_.erase(input);
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
  absl::Status s = SendAndWait(producer_, Entry(input, request, state));
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
