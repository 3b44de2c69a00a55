#include "hook_deliveries.h"

#include <chrono>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "relay/github/webhook_signature.h"
#include "relay/http/client.h"

namespace relay::fake_github {
namespace {

namespace json = boost::json;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string Iso(int64_t ms) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromUnixMillis(ms), absl::UTCTimeZone());
}

}  // namespace

HookDeliveries::~HookDeliveries() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void HookDeliveries::Configure(std::string url, std::string secret) {
  std::lock_guard lock(mu_);
  url_ = std::move(url);
  secret_ = std::move(secret);
  if (!worker_.joinable()) worker_ = std::thread([this] { Work(); });
}

absl::StatusOr<json::object> HookDeliveries::Deliver(const std::string& event, const std::string& body,
                                                     const std::string& guid, const std::string& mode,
                                                     int64_t delivered_at_ms) {
  if (mode != "ok" && mode != "fail" && mode != "unreachable" && mode != "lost") {
    return absl::InvalidArgumentError("mode must be ok, fail, unreachable or lost");
  }
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  Attempt a;
  a.guid = guid;
  a.event = event;
  a.body = body;
  if (!ec && v.is_object()) {
    if (const auto* act = v.as_object().if_contains("action"); act && act->is_string()) {
      a.action = std::string(act->as_string());
    }
  }
  std::lock_guard lock(mu_);
  if (mode == "ok" && url_.empty()) return absl::FailedPreconditionError("no intake configured (--deliver-to)");
  a.id = next_id_++;
  a.delivered_at_ms = delivered_at_ms > 0 ? delivered_at_ms : NowMs();
  if (mode == "fail") {
    a.status_code = 503;
    a.status = "Invalid HTTP Response: 503";
  } else if (mode == "unreachable") {
    a.status = "Failed to connect to host";
  } else if (mode == "lost") {
    a.status_code = 200;
    a.status = "OK";
  } else {
    a.status = "Pending";
    posts_.push_back({a.id});
    cv_.notify_all();
  }
  attempts_[a.id] = a;
  return ToJson(a);
}

absl::StatusOr<json::object> HookDeliveries::DeliverRequest(const std::string& request_body) {
  boost::system::error_code ec;
  json::value v = json::parse(request_body, ec);
  const json::object* o = ec ? nullptr : v.if_object();
  auto text = [&](const char* k) -> const json::string* {
    const json::value* x = o ? o->if_contains(k) : nullptr;
    return x && x->is_string() ? &x->as_string() : nullptr;
  };
  if (!o || !text("event") || !o->contains("body") || !text("guid")) {
    return absl::InvalidArgumentError("deliver needs event, body and guid");
  }
  const json::value& b = o->at("body");
  std::string body = b.is_string() ? std::string(b.as_string()) : json::serialize(b);
  const json::value* at = o->if_contains("delivered_at_ms");
  return Deliver(std::string(*text("event")), body, std::string(*text("guid")),
                 text("mode") ? std::string(*text("mode")) : "ok", at && at->is_int64() ? at->as_int64() : 0);
}

std::pair<json::array, std::string> HookDeliveries::List(int per_page, const std::string& cursor) const {
  per_page = std::clamp(per_page <= 0 ? 30 : per_page, 1, 100);
  int64_t below = 0;  // the cursor: list ids below it
  if (!absl::SimpleAtoi(cursor, &below) || below <= 0) below = INT64_MAX;
  std::lock_guard lock(mu_);
  json::array page;
  auto it = attempts_.lower_bound(below);
  while (it != attempts_.begin() && static_cast<int>(page.size()) < per_page) {
    --it;
    page.push_back(ToJson(it->second));
  }
  std::string next = it != attempts_.begin() ? std::to_string(it->first) : "";
  return {std::move(page), next};
}

bool HookDeliveries::Redeliver(int64_t id) {
  std::lock_guard lock(mu_);
  auto it = attempts_.find(id);
  if (it == attempts_.end() || url_.empty()) return false;
  Attempt a = it->second;
  a.id = next_id_++;
  a.redelivery = true;
  a.delivered_at_ms = NowMs();
  a.status = "Pending";
  a.status_code = 0;
  attempts_[a.id] = a;
  posts_.push_back({a.id});
  cv_.notify_all();
  return true;
}

void HookDeliveries::Drain() {
  std::unique_lock lock(mu_);
  drained_.wait(lock, [this] { return posts_.empty() && posting_ == 0; });
}

void HookDeliveries::Work() {
  std::unique_ptr<http::Client> client;
  std::string origin, path;
  for (;;) {
    Attempt a;
    std::string url, secret;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !posts_.empty(); });
      if (stop_) return;
      a = attempts_.at(posts_.front().attempt);
      posts_.pop_front();
      ++posting_;
      url = url_;
      secret = secret_;
    }
    // url: http://host:port/path
    auto slash = url.find('/', url.find("://") + 3);
    std::string want_origin = url.substr(0, slash), want_path = slash == std::string::npos ? "/" : url.substr(slash);
    if (!client || want_origin != origin) {
      origin = want_origin;
      auto c = http::Client::New(origin);
      client = c.ok() ? std::move(*c) : nullptr;
    }
    int code = 0;
    std::string status = "Failed to connect to host";
    auto start = std::chrono::steady_clock::now();
    if (client) {
      auto r = client->Send(boost::beast::http::verb::post, want_path,
                            {{"Content-Type", "application/json"},
                             {"User-Agent", "GitHub-Hookshot/fake"},
                             {"X-GitHub-Event", a.event},
                             {"X-GitHub-Delivery", a.guid},
                             {"X-GitHub-Hook-ID", "1"},
                             {"X-Hub-Signature-256", github::SignWebhook(secret, a.body)}},
                            a.body);
      if (r.ok()) {
        code = static_cast<int>(r->status);
        status = code >= 200 && code < 300 ? "OK" : absl::StrCat("Invalid HTTP Response: ", code);
      } else {
        client.reset();
      }
    }
    std::lock_guard lock(mu_);
    Attempt& done = attempts_.at(a.id);
    done.status_code = code;
    done.status = status;
    done.duration = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    --posting_;
    if (posts_.empty() && posting_ == 0) drained_.notify_all();
  }
}

json::object HookDeliveries::ToJson(const Attempt& a) const {
  return {{"id", a.id},
          {"guid", a.guid},
          {"delivered_at", Iso(a.delivered_at_ms)},
          {"redelivery", a.redelivery},
          {"duration", a.duration},
          {"status", a.status},
          {"status_code", a.status_code},
          {"event", a.event},
          {"action", a.action.empty() ? json::value(nullptr) : json::value(a.action)},
          {"installation_id", nullptr},
          {"repository_id", nullptr}};
}

}  // namespace relay::fake_github
