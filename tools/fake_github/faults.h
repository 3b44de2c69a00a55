// The fake GitHub's injected faults (POST /_fake/faults): an answer given
// instead of the real one to the next `count` calls whose method and path
// (query included) match, on every endpoint, the App's deliveries API
// included. Not thread-safe: the fake calls it under its lock.
#pragma once

#include <optional>
#include <regex>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include "absl/status/status.h"

namespace relay::fake_github {

class Faults {
 public:
  struct Answer {
    unsigned status = 500;
    std::string message;   // empty: "injected fault"
    int retry_after = -1;  // seconds; -1: no Retry-After header
  };
  // From POST /_fake/faults' body: {path (regex), status, method (default
  // any), count (default 1; -1 forever), retry_after, message}.
  absl::Status Add(const boost::json::object& o);
  // The answer for a call, when a fault matches it (one of its count used).
  std::optional<Answer> Take(const std::string& method, const std::string& path);
  size_t size() const { return faults_.size(); }
  void clear() { faults_.clear(); }

 private:
  struct Fault {
    std::string method;  // "" = any
    std::regex path;
    int count = 1;  // answers left; -1 = forever
    Answer answer;
  };
  std::vector<Fault> faults_;
};

}  // namespace relay::fake_github
