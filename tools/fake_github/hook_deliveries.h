// The fake GitHub's webhook deliveries of the App (fake_github.h): the fake
// delivers webhooks to intake as GitHub does (signed, X-GitHub-Delivery =
// the delivery's guid), keeps every attempt, lists them as
//   GET /app/hook/deliveries?per_page=N[&cursor=C]   newest first, Link: <...>; rel="next"
// and makes a new attempt on request:
//   POST /app/hook/deliveries/{id}/attempts          202, then posts the same body again
//                                                    (redelivery: true, same guid)
// A delivery can be made to fail (mode): "ok" (posted; intake's answer is
// the attempt's status), "fail" (not posted; recorded as a 503 answer),
// "unreachable" (not posted; status_code 0, as when GitHub cannot connect),
// "lost" (not posted, but recorded as 200: a proxy that answered for
// intake). Thread-safe; posts run on a thread of their own.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <boost/json.hpp>

#include "absl/status/statusor.h"

namespace relay::fake_github {

class HookDeliveries {
 public:
  ~HookDeliveries();
  // Where webhooks go (intake's /github/webhook URL) and the secret they are signed with.
  void Configure(std::string url, std::string secret);
  // Delivers a webhook now (mode as above); returns the delivery as listed.
  // `delivered_at_ms` > 0 dates the attempt in the past (a backlog: tests).
  absl::StatusOr<boost::json::object> Deliver(const std::string& event, const std::string& body,
                                              const std::string& guid, const std::string& mode,
                                              int64_t delivered_at_ms = 0);
  // The same from POST /_fake/deliver's body: {event, body (text or
  // object), guid, mode (default ok), delivered_at_ms (default now)}.
  absl::StatusOr<boost::json::object> DeliverRequest(const std::string& request_body);
  // One page, newest first, and the cursor of the next page (empty: none).
  std::pair<boost::json::array, std::string> List(int per_page, const std::string& cursor) const;
  // A new attempt of delivery `id`: false when there is no such delivery.
  bool Redeliver(int64_t id);
  // Waits until every post queued so far was made (tests).
  void Drain();

 private:
  struct Attempt {
    int64_t id = 0;
    std::string guid, event, action, body, status;
    int status_code = 0;
    int64_t delivered_at_ms = 0;
    bool redelivery = false;
    double duration = 0;
  };
  struct Post {
    int64_t attempt = 0;
  };
  void Work();
  boost::json::object ToJson(const Attempt& a) const;

  mutable std::mutex mu_;
  std::condition_variable cv_, drained_;
  std::string url_, secret_;
  std::map<int64_t, Attempt> attempts_;  // by id
  int64_t next_id_ = 1;
  std::deque<Post> posts_;
  int posting_ = 0;
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace relay::fake_github
