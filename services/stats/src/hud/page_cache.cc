#include "relay/stats/hud/page_cache.h"

#include <utility>

namespace relay::stats::hud {

PageCache::Role PageCache::Join(const std::string& key, http::Responder& responder) {
  std::optional<http::Response> copy;
  {
    std::lock_guard lock(mu_);
    auto now = clock_->Now();
    Trim(now);
    Entry& e = entries_[key];
    if (e.answer && now - e.made_at < options_.ttl) {
      copy = *e.answer;
    } else if (e.making) {
      e.waiting.push_back(std::move(responder));
      return Role::kWaiting;
    } else {
      e.making = true;
      return Role::kMake;
    }
  }
  // Sent outside the lock: a Responder may write at once (on its loop).
  copy->set("X-Cache", "hit");
  responder.Send(std::move(*copy));
  return Role::kAnswered;
}

size_t PageCache::Finish(const std::string& key, const http::Response& response, bool keep) {
  std::vector<http::Responder> waiting;
  {
    std::lock_guard lock(mu_);
    auto now = clock_->Now();
    auto it = entries_.find(key);
    if (it == entries_.end()) it = entries_.emplace(key, Entry{}).first;  // a Finish without Join: kept all the same
    Entry& e = it->second;
    waiting = std::move(e.waiting);
    e.waiting.clear();
    e.making = false;
    if (keep) {
      if (e.answer) bytes_ -= e.answer->body().size();
      e.answer = response;
      e.made_at = now;
      bytes_ += response.body().size();
      kept_.emplace_back(now, key);
    }
    if (!e.answer) entries_.erase(it);
    Trim(now);
  }
  for (http::Responder& r : waiting) {
    http::Response copy = response;
    copy.set("X-Cache", "shared");
    r.Send(std::move(copy));
  }
  return waiting.size();
}

void PageCache::Trim(std::chrono::steady_clock::time_point now) {
  while (!kept_.empty()) {
    const auto& [made_at, key] = kept_.front();
    auto it = entries_.find(key);
    // A record of an answer since replaced or dropped: nothing to do.
    bool current = it != entries_.end() && it->second.answer && it->second.made_at == made_at;
    if (current) {
      if (now - made_at < options_.ttl && bytes_ <= options_.max_bytes) break;
      Drop(it);
    }
    kept_.pop_front();
  }
}

void PageCache::Drop(std::map<std::string, Entry>::iterator it) {
  Entry& e = it->second;
  bytes_ -= e.answer->body().size();
  e.answer.reset();
  if (!e.making) entries_.erase(it);
}

size_t PageCache::Waiting(const std::string& key) const {
  std::lock_guard lock(mu_);
  auto it = entries_.find(key);
  return it == entries_.end() ? 0 : it->second.waiting.size();
}

size_t PageCache::entries() const {
  std::lock_guard lock(mu_);
  size_t n = 0;
  for (const auto& [key, e] : entries_) n += e.answer ? 1 : 0;
  return n;
}

size_t PageCache::bytes() const {
  std::lock_guard lock(mu_);
  return bytes_;
}

}  // namespace relay::stats::hud
