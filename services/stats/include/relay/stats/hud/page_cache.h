// The HUD's answers by request: a page asked for again within a short TTL
// is answered from memory, and a page asked for while it is being made
// waits for that one answer instead of making it again (single flight).
// So a crowd asking for the same expensive page costs ClickHouse one set of
// queries per TTL, and the requests it answers from memory take no render
// thread and no ClickHouse query at all.
#pragma once

#include <chrono>
#include <cstddef>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "relay/base/clock.h"
#include "relay/http/server.h"

namespace relay::stats::hud {

struct PageCacheOptions {
  std::chrono::milliseconds ttl{10'000};  // an answer is reused this long after it was made
  size_t max_bytes = 64 << 20;            // bodies kept at once; the oldest go first
};

// Answers it sends say how in `X-Cache`: `hit` (kept), `shared` (waited
// for the request making it); the maker's own says `miss`.
// Thread-safe. Keys are the caller's (the HUD: the page's path and its
// parameters, decoded and sorted, so the same page asked for in two
// spellings is one key).
class PageCache {
 public:
  PageCache(PageCacheOptions options, const Clock& clock) : options_(options), clock_(&clock) {}

  enum class Role {
    kAnswered,  // a fresh answer was there; `responder` was sent a copy
    kWaiting,   // someone makes this page now; `responder` gets its answer
    kMake,      // the caller makes it and calls Finish(key, ...) exactly once
  };
  // Takes `responder` (moved from) unless the role is kMake.
  Role Join(const std::string& key, http::Responder& responder);

  // The answer for `key`, made by the caller Join told to make it: every
  // request waiting for it gets a copy, and it is kept for the TTL when
  // `keep` (an error is shared with those waiting, never kept). Returns
  // how many waiting requests it answered.
  size_t Finish(const std::string& key, const http::Response& response, bool keep);

  // How many requests wait for `key`'s answer now.
  size_t Waiting(const std::string& key) const;

  // Answers kept (fresh or not yet dropped) and their body bytes.
  size_t entries() const;
  size_t bytes() const;

 private:
  struct Entry {
    std::optional<http::Response> answer;  // kept, made at made_at
    std::chrono::steady_clock::time_point made_at;
    bool making = false;
    std::vector<http::Responder> waiting;
  };
  // Drops answers past the TTL, then the oldest until within max_bytes.
  void Trim(std::chrono::steady_clock::time_point now);
  void Drop(std::map<std::string, Entry>::iterator it);

  const PageCacheOptions options_;
  const Clock* clock_;
  mutable std::mutex mu_;
  std::map<std::string, Entry> entries_;
  std::deque<std::pair<std::chrono::steady_clock::time_point, std::string>> kept_;  // oldest first
  size_t bytes_ = 0;
};

}  // namespace relay::stats::hud
