#include "relay/intake/delivery_dedup.h"

#include <algorithm>

namespace relay::intake {

DeliveryDedup::DeliveryDedup(const Clock* clock, std::chrono::milliseconds window, size_t max_entries)
    : clock_(clock), window_(window), max_entries_(max_entries) {
  // Sized for the cap up front: growing rehashes every id under mu_, a
  // stall of every HTTP thread (59 ms at 458k ids before this reserve;
  // tools/bench dedup_bench reports the worst Begin now). The slots are
  // untouched virtual memory until used. Past kMaxReserved ids, growth
  // rehashes again. The headroom is for ids in flight (claimed, not yet
  // durable), which the cap does not count.
  constexpr size_t kMaxReserved = size_t{1} << 22;
  constexpr size_t kInFlightHeadroom = 4096;
  entries_.reserve(std::min(max_entries_, kMaxReserved) + kInFlightHeadroom);
}

DeliveryDedup::Body* DeliveryDedup::Find(Bodies& bodies, const BodyDigest& digest) {
  for (auto& body : bodies) {
    if (body.digest == digest) return &body;
  }
  return nullptr;
}

void DeliveryDedup::ExpireLocked(std::chrono::steady_clock::time_point now) {
  while (!order_.empty() && (order_.front().at + window_ <= now || order_.size() > max_entries_)) {
    const Durable& oldest = order_.front();
    if (auto it = entries_.find(oldest.id); it != entries_.end()) {
      Bodies& bodies = it->second;
      bodies.erase(std::remove_if(bodies.begin(), bodies.end(),
                                  [&](const Body& b) { return b.durable && b.digest == oldest.digest; }),
                   bodies.end());
      if (bodies.empty()) entries_.erase(it);
    }
    order_.pop_front();
  }
}

DeliveryDedup::Claim DeliveryDedup::Begin(const std::string& delivery_id, const BodyDigest& digest,
                                          Waiter on_outcome) {
  std::lock_guard lock(mu_);
  ExpireLocked(clock_->Now());
  auto [it, inserted] = entries_.try_emplace(delivery_id);
  Bodies& bodies = it->second;
  if (Body* known = Find(bodies, digest)) {
    if (known->durable) return Claim::kDone;
    known->waiters.push_back(std::move(on_outcome));
    return Claim::kJoined;
  }
  bodies.push_back(Body{digest, false, {}});
  return inserted ? Claim::kNew : Claim::kConflict;
}

void DeliveryDedup::Finish(const std::string& delivery_id, const BodyDigest& digest, bool durable) {
  std::vector<Waiter> waiters;
  {
    std::lock_guard lock(mu_);
    auto it = entries_.find(delivery_id);
    if (it == entries_.end()) return;
    Bodies& bodies = it->second;
    Body* body = Find(bodies, digest);
    if (!body) return;
    waiters.swap(body->waiters);
    if (durable && window_.count() > 0) {
      body->durable = true;
      auto now = clock_->Now();
      order_.push_back({now, delivery_id, digest});
      ExpireLocked(now);
    } else {
      bodies.erase(bodies.begin() + (body - bodies.data()));
      if (bodies.empty()) entries_.erase(it);
    }
  }
  for (auto& w : waiters) std::move(w)(durable);
}

size_t DeliveryDedup::capacity() const {
  std::lock_guard lock(mu_);
  return entries_.capacity();
}

size_t DeliveryDedup::size() const {
  std::lock_guard lock(mu_);
  return entries_.size();
}

}  // namespace relay::intake
