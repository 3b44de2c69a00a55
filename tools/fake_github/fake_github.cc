#include "fake_github.h"
#include "faults.h"
#include "hook_deliveries.h"

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <queue>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include <boost/json.hpp>
#include <boost/url/parse.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"
#include "relay/auth/jwt.h"
#include "relay/http/router.h"
#include "relay/http/server.h"

namespace relay::fake_github {
namespace {

namespace bhttp = boost::beast::http;
namespace json = boost::json;
using Clock = std::chrono::steady_clock;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string IsoTime(int64_t unix_s) {
  std::time_t t = static_cast<std::time_t>(unix_s);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

http::Response Json(unsigned status, const json::value& body) {
  return http::MakeResponse(status, json::serialize(body));
}

http::Response Message(unsigned status, const std::string& message) {
  return Json(status, json::object{{"message", message}, {"documentation_url", "https://docs.github.com/rest"}});
}

// A query parameter of a request target, decoded; "" when absent.
std::string Query(const std::string& target, std::string_view name) {
  auto url = boost::urls::parse_origin_form(target);
  if (!url) return "";
  auto params = url->params();
  auto it = params.find(name);
  return it == params.end() ? "" : std::string((*it).value);
}

// One page of a listing, as GitHub pages it (per_page 30 by default, at
// most 100; page from 1).
json::array Page(const json::array& all, const std::string& target) {
  int64_t per_page = std::clamp<int64_t>(std::atoll(Query(target, "per_page").c_str()), 0, 100);
  if (per_page == 0) per_page = 30;
  int64_t page = std::max<int64_t>(std::atoll(Query(target, "page").c_str()), 1);
  json::array out;
  for (int64_t i = (page - 1) * per_page; i < std::min<int64_t>(page * per_page, all.size()); ++i) out.push_back(all[i]);
  return out;
}

bool IsWrite(bhttp::verb m) {
  return m == bhttp::verb::post || m == bhttp::verb::patch || m == bhttp::verb::put || m == bhttp::verb::delete_;
}

struct Installation {
  int64_t id = 0;
  int64_t limit = 5000;
  int64_t remaining = 5000;
  int64_t reset_unix = 0;
};

struct CheckRun {
  int64_t id = 0;
  std::string repo, name, head_sha, external_id, status = "queued", conclusion, details_url;
  json::object output;
};

struct Comment {
  int64_t id = 0;
  std::string repo;
  int64_t issue = 0;
  std::string body;
};

// A response due later (configured latency).
struct Due {
  Clock::time_point at;
  uint64_t seq;
  std::shared_ptr<http::Responder> responder;
  std::shared_ptr<http::Response> response;
  bool operator>(const Due& o) const { return at != o.at ? at > o.at : seq > o.seq; }
};

class FakeImpl final : public FakeGitHub {
 public:
  explicit FakeImpl(Options options) : options_(std::move(options)) {}

  ~FakeImpl() override { Stop(); }

  absl::Status Start() {
    if (!options_.public_key_pem.empty()) {
      auto key = auth::RsaKey::FromPem(options_.public_key_pem);
      if (!key.ok()) return key.status();
      app_key_ = std::move(*key);
    }
    if (!options_.record_file.empty()) {
      record_ = std::fopen(options_.record_file.c_str(), "a");
      if (!record_) return absl::InvalidArgumentError("cannot open " + options_.record_file);
    }
    router_.Add(bhttp::verb::post, "/_fake/config", [this](http::Request&& r, http::Responder s) { Config(r, s); },
                1 << 20);
    router_.Add(bhttp::verb::post, "/_fake/faults", [this](http::Request&& r, http::Responder s) { AddFault(r, s); },
                1 << 20);
    router_.Add(bhttp::verb::get, "/_fake/stats", [this](http::Request&&, http::Responder s) { Stats(s); });
    router_.Add(bhttp::verb::get, "/_fake/calls", [this](http::Request&& r, http::Responder s) {
      auto url = boost::urls::parse_origin_form(std::string_view(r.target()));
      std::string since = "0", limit = "0";
      if (url) if (auto ps = url->params(); ps.find("since") != ps.end()) since = (*ps.find("since")).value;
      if (url) if (auto ps = url->params(); ps.find("limit") != ps.end()) limit = (*ps.find("limit")).value;
      Calls(s, std::string_view(r.target()).find("brief=1") != std::string_view::npos, std::strtoul(since.c_str(), nullptr, 10),
            std::strtoul(limit.c_str(), nullptr, 10));
    });
    router_.Add(bhttp::verb::post, "/_fake/reset", [this](http::Request&&, http::Responder s) { Reset(s); });
    router_.Add(bhttp::verb::post, "/_fake/deliver", [this](http::Request&& r, http::Responder s) { Deliver(r, s); },
                32 << 20);
    router_.Add(bhttp::verb::post, "/_fake/deliveries/drain", [this](http::Request&&, http::Responder s) {
      hooks_.Drain();
      s.Send(Json(200, json::object{{"ok", true}}));
    });
    if (!options_.deliver_to.empty()) hooks_.Configure(options_.deliver_to, options_.webhook_secret);
    http::ServerOptions so;
    so.host = options_.host;
    so.port = options_.port;
    so.threads = options_.threads;
    so.body_limit = 32 * 1024 * 1024;
    so.max_connections = 100'000;
    so.handler_timeout = std::chrono::minutes(10);
    // The API itself: every other path, dispatched by hand below (GitHub's
    // paths carry parameters; the router matches exact paths).
    auto handler = [this](http::Request&& r, http::Responder s) {
      std::string_view target = r.target();
      if (target.rfind("/_fake/", 0) == 0) return router_.Handle(std::move(r), std::move(s));
      Api(std::move(r), std::move(s));
    };
    auto server = http::Server::Start(so, handler, &registry_);
    if (!server.ok()) return server.status();
    server_ = std::move(*server);
    timer_ = std::thread([this] { TimerLoop(); });
    return absl::OkStatus();
  }

  uint16_t port() const override { return server_ ? server_->port() : 0; }

  void Stop() override {
    if (stopped_.exchange(true)) return;
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (timer_.joinable()) timer_.join();
    if (server_) server_->Shutdown(std::chrono::seconds(2));
    {
      std::lock_guard lock(mu_);
      while (!due_.empty()) due_.pop();  // their responders answer 500 while the server still exists
    }
    server_.reset();
    if (record_) std::fclose(record_);
    record_ = nullptr;
  }

 private:
  // --- control ---------------------------------------------------------------

  static const json::object* ParseObject(const std::string& body, json::value* holder) {
    boost::system::error_code ec;
    *holder = json::parse(body, ec);
    return ec ? nullptr : holder->if_object();
  }

  void Config(const http::Request& r, http::Responder& s) {
    json::value v;
    const json::object* o = ParseObject(r.body(), &v);
    if (!o) return s.Send(Message(400, "config must be a JSON object"));
    std::lock_guard lock(mu_);
    if (auto* x = o->if_contains("deliver_to"); x && x->is_string()) {
      const auto* secret = o->if_contains("webhook_secret");
      hooks_.Configure(std::string(x->as_string()),
                       secret && secret->is_string() ? std::string(secret->as_string()) : std::string());
    }
    if (auto* x = o->if_contains("latency_ms")) latency_ms_ = x->to_number<int64_t>();
    if (auto* x = o->if_contains("token_ttl_seconds")) token_ttl_s_ = x->to_number<int64_t>();
    if (auto* x = o->if_contains("rate_limit")) {
      const auto& rl = x->as_object();
      if (auto* l = rl.if_contains("limit")) rate_limit_ = l->to_number<int64_t>();
      if (auto* w = rl.if_contains("window_seconds")) rate_window_s_ = w->to_number<int64_t>();
      installations_.clear();  // fresh budgets under the new limit
    }
    if (auto* x = o->if_contains("content_limit")) {
      const auto& cl = x->as_object();
      if (auto* l = cl.if_contains("per_window")) content_limit_ = l->to_number<int64_t>();
      if (auto* w = cl.if_contains("window_seconds")) content_window_ms_ = w->to_number<int64_t>() * 1000;
      if (auto* h = cl.if_contains("per_hour")) content_hour_limit_ = h->to_number<int64_t>();
    }
    if (auto* x = o->if_contains("not_installed")) {
      not_installed_.clear();
      for (const auto& repo : x->as_array()) not_installed_.insert(absl::AsciiStrToLower(std::string(repo.as_string())));
    }
    if (auto* x = o->if_contains("reinstall"); x && x->is_bool() && x->as_bool()) {
      // Every owner uninstalls and reinstalls the App: new installation ids
      // for the same repositories; tokens of the old ones stop working and
      // their token exchanges answer 404.
      for (auto& [owner, inst] : installations_) inst.id = next_installation_id_++;
      ++reinstalls_;
    }
    if (auto* x = o->if_contains("running_runs")) {
      running_runs_.clear();
      for (const auto& id : x->as_array()) running_runs_.insert(id.to_number<int64_t>());
    }
    s.Send(Json(200, json::object{{"ok", true}}));
  }

  void AddFault(const http::Request& r, http::Responder& s) {
    json::value v;
    const json::object* o = ParseObject(r.body(), &v);
    std::lock_guard lock(mu_);
    absl::Status added = o ? faults_.Add(*o) : absl::InvalidArgumentError("a fault needs path (regex) and status");
    if (!added.ok()) return s.Send(Message(400, std::string(added.message())));
    s.Send(Json(201, json::object{{"faults", faults_.size()}}));
  }

  void Stats(http::Responder& s) {
    std::lock_guard lock(mu_);
    json::object by_endpoint;
    for (const auto& [k, n] : calls_by_endpoint_) by_endpoint[k] = n;
    s.Send(Json(200, json::object{{"calls", calls_.size()},
                                  {"calls_by_endpoint", by_endpoint},
                                  {"dispatches", dispatches_},
                                  {"in_flight", in_flight_},
                                  {"max_in_flight", max_in_flight_},  // requests at once, at the most
                                  {"breaches", json::object{{"primary", primary_breaches_},
                                                            {"secondary", secondary_breaches_},
                                                            {"hourly", hourly_breaches_},
                                                            {"retry_after", retry_after_breaches_}}},
                                  {"retry_after_answers", retry_after_answers_},
                                  {"unauthorized", unauthorized_},
                                  {"reinstalls", reinstalls_},
                                  {"token_fetches", token_fetches_}}));
  }

  // ?brief=1 leaves out the upstream payloads dispatches carry (a test of
  // ten thousand dispatches would otherwise fetch hundreds of MB).
  // GET /_fake/calls[?brief=1][&since=N][&limit=M]: the calls from the N-th on, M at most.
  void Calls(http::Responder& s, bool brief, size_t since, size_t limit) {
    std::lock_guard lock(mu_);
    if (record_) std::fflush(record_);
    json::array all;
    size_t end = limit ? std::min(calls_.size(), since + limit) : calls_.size();
    for (size_t i = since; i < end; ++i) {
      all.push_back(calls_[i]);
      if (!brief) continue;
      auto& o = all.back().as_object();
      if (auto* body = o.if_contains("body"); body && body->is_object()) {
        if (auto* cp = body->as_object().if_contains("client_payload"); cp && cp->is_object()) {
          cp->as_object().erase("payload");
        }
      }
    }
    s.Send(Json(200, all));
  }

  void Reset(http::Responder& s) {
    std::lock_guard lock(mu_);
    calls_.clear();
    calls_by_endpoint_.clear();
    faults_.clear();
    installations_.clear();
    tokens_.clear();
    content_times_.clear();
    check_runs_.clear();
    comments_.clear();
    dispatches_ = primary_breaches_ = secondary_breaches_ = token_fetches_ = unauthorized_ = reinstalls_ = 0;
    hourly_breaches_ = retry_after_breaches_ = retry_after_answers_ = 0;
    max_in_flight_ = in_flight_;
    hour_times_.clear();
    retry_after_until_ = {};
    latency_ms_ = 0;
    s.Send(Json(200, json::object{{"ok", true}}));
  }

  // --- the API ---------------------------------------------------------------

  struct Call {
    int64_t t0_ms;
    std::string method, path, endpoint, key;
    std::string repo;
    std::string body;  // writes only
  };

  // Under mu_: an injected fault's answer for this call, if one matches.
  std::optional<http::Response> Faulted(const Call& call) {
    auto f = faults_.Take(call.method, call.path);
    if (!f) return std::nullopt;
    auto res = Message(f->status, f->message.empty() ? "injected fault" : f->message);
    if (f->retry_after >= 0) {
      res.set(bhttp::field::retry_after, std::to_string(f->retry_after));
      retry_after_until_ = std::max(retry_after_until_, Clock::now() + std::chrono::seconds(f->retry_after));
      ++retry_after_answers_;
    }
    return res;
  }

  // --- the App's webhook deliveries (hook_deliveries.h) ----------------------

  // Under mu_ (HookDeliveries locks its own).
  http::Response HookDeliveryApi(const http::Request& r, const std::vector<std::string>& seg, Call* call,
                                 const std::string& bearer) {
    if (seg.size() == 3 && r.method() == bhttp::verb::get) {
      call->endpoint = "GET /app/hook/deliveries";
      if (auto res = Faulted(*call)) return *res;
      if (auto err = CheckAppJwt(bearer)) return *err;
      std::string target(r.target());
      int per_page = std::atoi(Query(target, "per_page").c_str());
      auto [page, next] = hooks_.List(per_page, Query(target, "cursor"));
      http::Response res = Json(200, page);
      if (!next.empty()) {
        res.set(bhttp::field::link, absl::StrCat("<http://", std::string(r[bhttp::field::host]),
                                                 "/app/hook/deliveries?per_page=", per_page <= 0 ? 30 : per_page,
                                                 "&cursor=", next, ">; rel=\"next\""));
      }
      return res;
    }
    if (seg.size() == 5 && seg[4] == "attempts" && r.method() == bhttp::verb::post) {
      call->endpoint = "POST /app/hook/deliveries/{delivery_id}/attempts";
      if (auto res = Faulted(*call)) return *res;
      if (auto err = CheckAppJwt(bearer)) return *err;
      int64_t id = std::atoll(seg[3].c_str());
      if (!hooks_.Redeliver(id)) return Message(404, "Not Found");
      return Json(202, json::object{});
    }
    return Message(404, "Not Found");
  }

  // POST /_fake/deliver {event, body (text or object), guid, mode}: a webhook
  // delivered (or not) to intake now.
  void Deliver(const http::Request& r, http::Responder& s) {
    auto d = hooks_.DeliverRequest(r.body());
    if (!d.ok()) return s.Send(Message(400, std::string(d.status().message())));
    s.Send(Json(201, *d));
  }

  void Api(http::Request&& r, http::Responder s) {
    Call call{NowMs(), std::string(bhttp::to_string(r.method())), std::string(r.target()), "", "", "", ""};
    call.key = std::string(r["X-Relay-Idempotency-Key"]);
    if (IsWrite(r.method())) call.body = r.body();
    std::vector<std::string> seg = absl::StrSplit(call.path.substr(0, call.path.find('?')), '/', absl::SkipEmpty());
    http::Response response;
    {
      std::lock_guard lock(mu_);
      max_in_flight_ = std::max(max_in_flight_, ++in_flight_);
      response = Route(r, seg, &call);
    }
    Respond(std::move(s), std::move(response), std::move(call));
  }

  // Under mu_.
  http::Response Route(const http::Request& r, const std::vector<std::string>& seg, Call* call) {
    auto m = r.method();
    auto bearer = std::string(r[bhttp::field::authorization]);
    if (bearer.rfind("Bearer ", 0) == 0 || bearer.rfind("token ", 0) == 0) bearer = bearer.substr(bearer.find(' ') + 1);
    // App endpoints: the app JWT.
    if (seg.size() == 4 && seg[0] == "repos" && seg[3] == "installation" && m == bhttp::verb::get) {
      call->endpoint = "GET /repos/{owner}/{repo}/installation";
      call->repo = seg[1] + "/" + seg[2];
      if (auto res = Faulted(*call)) return *res;
      if (auto err = CheckAppJwt(bearer)) return *err;
      if (not_installed_.count(absl::AsciiStrToLower(call->repo))) return Message(404, "Not Found");
      return Json(200, json::object{{"id", InstallationOf(call->repo).id}, {"app_id", options_.app_id}});
    }
    if (seg.size() == 4 && seg[0] == "app" && seg[1] == "installations" && seg[3] == "access_tokens" &&
        m == bhttp::verb::post) {
      call->endpoint = "POST /app/installations/{id}/access_tokens";
      if (auto res = Faulted(*call)) return *res;
      if (auto err = CheckAppJwt(bearer)) return *err;
      int64_t installation = std::atoll(seg[2].c_str());
      bool exists = false;
      for (const auto& [owner, inst] : installations_) exists = exists || inst.id == installation;
      if (!exists) return Message(404, "Not Found");
      std::string token = "ghs_fake_" + std::to_string(installation) + "_" + std::to_string(rng_());
      int64_t expires = NowMs() / 1000 + token_ttl_s_;
      tokens_[token] = {installation, expires};
      ++token_fetches_;
      return Json(201, json::object{{"token", token}, {"expires_at", IsoTime(expires)}});
    }
    if (seg.size() >= 3 && seg[0] == "app" && seg[1] == "hook" && seg[2] == "deliveries") {
      return HookDeliveryApi(r, seg, call, bearer);
    }
    if (seg.size() < 3 || seg[0] != "repos") return Message(404, "Not Found");
    call->repo = seg[1] + "/" + seg[2];
    call->endpoint = Endpoint(m, seg);
    // Everything else: an installation token for this repo.
    auto token = tokens_.find(bearer);
    Installation& inst = InstallationOf(call->repo);
    if (token == tokens_.end() || token->second.second <= NowMs() / 1000 || token->second.first != inst.id) {
      ++unauthorized_;
      return Message(401, "Bad credentials");
    }
    // A repository the App was removed from: GitHub answers 404.
    if (not_installed_.count(absl::AsciiStrToLower(call->repo))) return Message(404, "Not Found");
    // Primary rate limit: every request counts.
    int64_t now_s = NowMs() / 1000;
    if (now_s >= inst.reset_unix) {
      inst.remaining = inst.limit;
      inst.reset_unix = now_s + rate_window_s_;
    }
    if (inst.remaining <= 0) {
      ++primary_breaches_;
      auto res = Message(403, "API rate limit exceeded for installation ID " + std::to_string(inst.id) + ".");
      RateHeaders(res, inst);
      return res;
    }
    --inst.remaining;
    // A write while a Retry-After the fake gave is running: GitHub holds
    // that against the App (it may block it), whichever process sent it.
    if (IsWrite(m) && Clock::now() < retry_after_until_) ++retry_after_breaches_;
    // Secondary: content-creating requests per window, and per hour.
    if (IsWrite(m)) {
      auto now = Clock::now();
      while (!hour_times_.empty() && now - hour_times_.front() >= std::chrono::hours(1)) hour_times_.pop_front();
      if (static_cast<int64_t>(hour_times_.size()) >= content_hour_limit_) {
        ++hourly_breaches_;
        auto res = Message(403, "You have exceeded a secondary rate limit (content creation per hour).");
        res.set(bhttp::field::retry_after, "60");
        retry_after_until_ = std::max(retry_after_until_, now + std::chrono::seconds(60));
        ++retry_after_answers_;
        RateHeaders(res, inst);
        return res;
      }
      while (!content_times_.empty() &&
             now - content_times_.front() >= std::chrono::milliseconds(content_window_ms_)) {
        content_times_.pop_front();
      }
      if (static_cast<int64_t>(content_times_.size()) >= content_limit_) {
        ++secondary_breaches_;
        auto wait = std::chrono::duration_cast<std::chrono::seconds>(
                        content_times_.front() + std::chrono::milliseconds(content_window_ms_) - now)
                        .count() + 1;
        auto res = Message(429, "You have exceeded a secondary rate limit. Please wait a few minutes before you try again.");
        res.set(bhttp::field::retry_after, std::to_string(wait));
        retry_after_until_ = std::max(retry_after_until_, now + std::chrono::seconds(wait));
        ++retry_after_answers_;
        RateHeaders(res, inst);
        return res;
      }
      content_times_.push_back(now);
      hour_times_.push_back(now);
    }
    // Injected faults.
    if (auto res = Faulted(*call)) {
      RateHeaders(*res, inst);
      return *res;
    }
    auto res = Handle(r, seg, call);
    RateHeaders(res, inst);
    return res;
  }

  static std::string Endpoint(bhttp::verb m, const std::vector<std::string>& seg) {
    std::string e = std::string(bhttp::to_string(m)) + " /repos/{owner}/{repo}";
    for (size_t i = 3; i < seg.size(); ++i) {
      bool id = !seg[i].empty() && std::all_of(seg[i].begin(), seg[i].end(), ::isdigit);
      bool sha = seg[i].size() == 40 || (i > 3 && seg[i - 1] == "commits");
      e += "/" + (id ? "{id}" : sha ? "{ref}" : seg[i]);
    }
    return e;
  }

  void RateHeaders(http::Response& res, const Installation& inst) {
    res.set("X-RateLimit-Limit", std::to_string(inst.limit));
    res.set("X-RateLimit-Remaining", std::to_string(inst.remaining));
    res.set("X-RateLimit-Reset", std::to_string(inst.reset_unix));
    res.set("X-RateLimit-Used", std::to_string(inst.limit - inst.remaining));
    res.set("X-RateLimit-Resource", "core");
  }

  Installation& InstallationOf(const std::string& repo) {
    // One installation per owner (an app installed on an organization).
    std::string owner = absl::AsciiStrToLower(repo.substr(0, repo.find('/')));
    auto [it, inserted] = installations_.try_emplace(owner);
    if (inserted) {
      it->second.id = next_installation_id_++;
      it->second.limit = it->second.remaining = rate_limit_;
      it->second.reset_unix = NowMs() / 1000 + rate_window_s_;
    }
    return it->second;
  }

  std::optional<http::Response> CheckAppJwt(const std::string& token) {
    if (!app_key_) return Message(401, "A JSON web token could not be decoded");
    auto verified = auth::VerifyRs256(token, *app_key_);
    if (!verified.ok()) return Message(401, "A JSON web token could not be decoded");
    const auto& c = verified->claims;
    int64_t now = NowMs() / 1000;
    auto num = [&](const char* k) -> std::optional<int64_t> {
      auto* v = c.if_contains(k);
      return v && v->is_number() ? std::optional<int64_t>(v->to_number<int64_t>()) : std::nullopt;
    };
    auto iss = c.if_contains("iss");
    std::string issuer = !iss ? "" : iss->is_string() ? std::string(iss->as_string()) : json::serialize(*iss);
    auto iat = num("iat"), exp = num("exp");
    if (issuer != options_.app_id) return Message(401, "'Issuer' claim ('iss') must be the app id");
    if (!iat || !exp || *exp <= now || *iat > now + 60 || *exp - *iat > 600) {
      return Message(401, "'Expiration time' claim ('exp') is too far in the future or in the past");
    }
    return std::nullopt;
  }

  http::Response Handle(const http::Request& r, const std::vector<std::string>& seg, Call* call) {
    auto m = r.method();
    json::value body_holder;
    const json::object* body = IsWrite(m) ? ParseObject(r.body(), &body_holder) : nullptr;
    if (IsWrite(m) && !body && !r.body().empty()) return Message(400, "Problems parsing JSON");
    static const json::object kEmpty;
    if (!body) body = &kEmpty;
    // POST /repos/{o}/{r}/dispatches
    if (seg.size() == 4 && seg[3] == "dispatches" && m == bhttp::verb::post) {
      auto* et = body->if_contains("event_type");
      if (!et || !et->is_string() || et->as_string().empty() || et->as_string().size() > 100) {
        return Message(422, "event_type must be 1-100 characters");
      }
      if (auto* cp = body->if_contains("client_payload")) {
        if (!cp->is_object()) return Message(422, "client_payload is not an object");
        if (cp->as_object().size() > 10) return Message(422, "client_payload cannot have more than 10 top-level properties");
      }
      if (r.body().size() >= 64 * 1024) return Message(422, "client_payload is too large (the payload must be under 64 KB)");
      ++dispatches_;
      return http::MakeResponse(204, "");
    }
    // POST /repos/{o}/{r}/actions/runs/{id}/rerun-failed-jobs
    if (seg.size() == 7 && seg[3] == "actions" && seg[4] == "runs" && seg[6] == "rerun-failed-jobs" &&
        m == bhttp::verb::post) {
      if (running_runs_.count(std::atoll(seg[5].c_str()))) return Message(403, "This workflow is already running");
      return Json(201, json::object{});
    }
    // Check runs.
    if (seg.size() == 4 && seg[3] == "check-runs" && m == bhttp::verb::post) {
      CheckRun cr;
      cr.id = ++next_id_;
      cr.repo = call->repo;
      auto str = [&](const char* k) {
        auto* v = body->if_contains(k);
        return v && v->is_string() ? std::string(v->as_string()) : std::string();
      };
      cr.name = str("name");
      cr.head_sha = str("head_sha");
      if (cr.name.empty() || cr.head_sha.empty()) return Message(422, "name and head_sha are required");
      cr.external_id = str("external_id");
      if (!str("status").empty()) cr.status = str("status");
      cr.conclusion = str("conclusion");
      cr.details_url = str("details_url");
      if (auto* o = body->if_contains("output"); o && o->is_object()) cr.output = o->as_object();
      check_runs_[cr.id] = cr;
      return Json(201, CheckRunJson(cr));
    }
    if (seg.size() == 5 && seg[3] == "check-runs" && m == bhttp::verb::patch) {
      auto it = check_runs_.find(std::atoll(seg[4].c_str()));
      if (it == check_runs_.end() || absl::AsciiStrToLower(it->second.repo) != absl::AsciiStrToLower(call->repo)) {
        return Message(404, "Not Found");
      }
      for (const char* k : {"status", "conclusion", "details_url", "external_id", "name"}) {
        if (auto* v = body->if_contains(k); v && v->is_string()) {
          std::string val(v->as_string());
          if (std::string(k) == "status") it->second.status = val;
          if (std::string(k) == "conclusion") it->second.conclusion = val;
          if (std::string(k) == "details_url") it->second.details_url = val;
          if (std::string(k) == "external_id") it->second.external_id = val;
          if (std::string(k) == "name") it->second.name = val;
        }
      }
      if (auto* o = body->if_contains("output"); o && o->is_object()) it->second.output = o->as_object();
      return Json(200, CheckRunJson(it->second));
    }
    if (seg.size() == 6 && seg[3] == "commits" && seg[5] == "check-runs" && m == bhttp::verb::get) {
      std::string name = Query(call->path, "check_name");
      // GitHub's default filter (latest) lists only the newest run of each name.
      bool all = Query(call->path, "filter") == "all";
      std::map<std::string, const CheckRun*> latest;
      json::array runs;
      for (const auto& [id, cr] : check_runs_) {
        if (cr.head_sha == seg[4] && absl::AsciiStrToLower(cr.repo) == absl::AsciiStrToLower(call->repo) &&
            (name.empty() || cr.name == name)) {
          if (all) runs.push_back(CheckRunJson(cr));
          latest[cr.name] = &cr;  // ids ascend
        }
      }
      if (!all) {
        for (const auto& [n, cr] : latest) runs.push_back(CheckRunJson(*cr));
      }
      return Json(200, json::object{{"total_count", runs.size()}, {"check_runs", Page(runs, call->path)}});
    }
    if (seg.size() == 6 && seg[3] == "check-suites" && seg[5] == "check-runs" && m == bhttp::verb::get) {
      // The fake's suites: one per head sha; the suite id is in check_suite_of.
      json::array runs;
      for (const auto& [id, cr] : check_runs_) {
        if (SuiteId(cr.repo, cr.head_sha) == std::atoll(seg[4].c_str())) runs.push_back(CheckRunJson(cr));
      }
      return Json(200, json::object{{"total_count", runs.size()}, {"check_runs", Page(runs, call->path)}});
    }
    // Issue comments.
    if (seg.size() == 6 && seg[3] == "issues" && seg[5] == "comments") {
      int64_t issue = std::atoll(seg[4].c_str());
      if (m == bhttp::verb::get) {
        json::array out;
        for (const auto& [id, c] : comments_) {
          if (c.issue == issue && absl::AsciiStrToLower(c.repo) == absl::AsciiStrToLower(call->repo)) {
            out.push_back(json::object{{"id", c.id}, {"body", c.body}});
          }
        }
        return Json(200, Page(out, call->path));
      }
      if (m == bhttp::verb::post) {
        auto* b = body->if_contains("body");
        if (!b || !b->is_string()) return Message(422, "body is required");
        Comment c{++next_id_, call->repo, issue, std::string(b->as_string())};
        comments_[c.id] = c;
        return Json(201, json::object{{"id", c.id}, {"body", c.body}});
      }
    }
    if (seg.size() == 6 && seg[3] == "issues" && seg[4] == "comments" && m == bhttp::verb::patch) {
      auto it = comments_.find(std::atoll(seg[5].c_str()));
      if (it == comments_.end()) return Message(404, "Not Found");
      if (auto* b = body->if_contains("body"); b && b->is_string()) it->second.body = std::string(b->as_string());
      return Json(200, json::object{{"id", it->second.id}, {"body", it->second.body}});
    }
    return Message(404, "Not Found");
  }

  static int64_t SuiteId(const std::string& repo, const std::string& sha) {
    return static_cast<int64_t>(std::hash<std::string>()(absl::AsciiStrToLower(repo) + "@" + sha) % 1'000'000'000);
  }

  static json::object CheckRunJson(const CheckRun& cr) {
    return json::object{{"id", cr.id},
                        {"name", cr.name},
                        {"head_sha", cr.head_sha},
                        {"external_id", cr.external_id},
                        {"status", cr.status},
                        {"conclusion", cr.conclusion.empty() ? json::value(nullptr) : json::value(cr.conclusion)},
                        {"details_url", cr.details_url},
                        {"output", cr.output},
                        {"check_suite", json::object{{"id", SuiteId(cr.repo, cr.head_sha)}}}};
  }

  // --- answering, later when latency is configured ---------------------------

  void Respond(http::Responder s, http::Response response, Call call) {
    int64_t latency;
    {
      std::lock_guard lock(mu_);
      latency = latency_ms_;
    }
    auto finish = [this, call = std::move(call), status = response.result_int()]() mutable {
      Record(call, status);
    };
    if (latency <= 0) {
      s.Send(std::move(response));
      finish();
      return;
    }
    auto responder = std::make_shared<http::Responder>(std::move(s));
    auto res = std::make_shared<http::Response>(std::move(response));
    std::lock_guard lock(mu_);
    due_.push(Due{Clock::now() + std::chrono::milliseconds(latency), ++due_seq_, responder, res});
    pending_calls_.emplace(due_seq_, std::move(finish));
    cv_.notify_all();
  }

  void TimerLoop() {
    std::unique_lock lock(mu_);
    while (!stopping_) {
      if (due_.empty()) {
        cv_.wait_for(lock, std::chrono::milliseconds(100));
      } else if (auto at = due_.top().at; at > Clock::now()) {
        cv_.wait_until(lock, at);  // a copy: a push while waiting may move the queue's storage
      }
      if (record_ && Clock::now() - last_flush_ > std::chrono::milliseconds(100)) {
        std::fflush(record_);
        last_flush_ = Clock::now();
      }
      std::vector<std::pair<Due, std::function<void()>>> ready;
      while (!due_.empty() && due_.top().at <= Clock::now()) {
        Due d = due_.top();
        due_.pop();
        auto it = pending_calls_.find(d.seq);
        ready.emplace_back(d, std::move(it->second));
        pending_calls_.erase(it);
      }
      lock.unlock();
      for (auto& [d, finish] : ready) {
        d.responder->Send(std::move(*d.response));
        finish();
      }
      lock.lock();
    }
  }

  void Record(const Call& call, unsigned status) {
    json::object line{{"t0", call.t0_ms}, {"t1", NowMs()},     {"method", call.method}, {"path", call.path},
                      {"endpoint", call.endpoint}, {"repo", call.repo}, {"status", status}};
    if (!call.key.empty()) line["idempotency_key"] = call.key;
    if (!call.body.empty()) {
      boost::system::error_code ec;
      json::value body = json::parse(call.body, ec);
      line["body"] = ec ? json::value(call.body) : body;
    }
    std::lock_guard lock(mu_);
    --in_flight_;
    ++calls_by_endpoint_[call.endpoint.empty() ? call.method + " " + call.path : call.endpoint + " " + std::to_string(status)];
    if (record_) {
      std::string text = json::serialize(line);
      text.push_back('\n');
      std::fwrite(text.data(), 1, text.size(), record_);
    }
    calls_.push_back(std::move(line));
  }

  Options options_;
  std::optional<auth::RsaKey> app_key_;
  HookDeliveries hooks_;  // the App's webhook deliveries; locks on its own
  prometheus::Registry registry_;
  http::Router router_;
  std::unique_ptr<http::Server> server_;
  std::thread timer_;
  std::atomic<bool> stopped_{false};

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::FILE* record_ = nullptr;
  Clock::time_point last_flush_{};
  std::mt19937_64 rng_{std::random_device{}()};
  int64_t latency_ms_ = 0;
  int64_t token_ttl_s_ = 3600;
  int64_t rate_limit_ = 5000;
  int64_t rate_window_s_ = 3600;
  int64_t content_limit_ = 1'000'000;  // secondary ceiling per window; off unless configured
  int64_t content_window_ms_ = 60'000;
  std::set<std::string> not_installed_;
  std::set<int64_t> running_runs_;
  Faults faults_;
  std::map<std::string, Installation> installations_;
  std::map<std::string, std::pair<int64_t, int64_t>> tokens_;  // token -> (installation, expires unix)
  std::deque<Clock::time_point> content_times_;
  std::map<int64_t, CheckRun> check_runs_;
  std::map<int64_t, Comment> comments_;
  int64_t next_id_ = 7'000'000;
  std::vector<json::object> calls_;
  std::map<std::string, int64_t> calls_by_endpoint_;
  int64_t dispatches_ = 0, primary_breaches_ = 0, secondary_breaches_ = 0, token_fetches_ = 0, in_flight_ = 0,
          max_in_flight_ = 0;
  int64_t unauthorized_ = 0, reinstalls_ = 0;  // 401s on repository calls; reinstall configs
  int64_t content_hour_limit_ = 1'000'000'000;  // content-creating writes an hour; off unless configured
  std::deque<Clock::time_point> hour_times_;
  int64_t hourly_breaches_ = 0, retry_after_breaches_ = 0, retry_after_answers_ = 0;
  Clock::time_point retry_after_until_{};     // the latest Retry-After the fake gave runs until
  int64_t next_installation_id_ = 1001;
  std::priority_queue<Due, std::vector<Due>, std::greater<Due>> due_;
  uint64_t due_seq_ = 0;
  std::map<uint64_t, std::function<void()>> pending_calls_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<FakeGitHub>> FakeGitHub::Start(Options options) {
  auto fake = std::make_unique<FakeImpl>(std::move(options));
  if (absl::Status s = fake->Start(); !s.ok()) return s;
  return std::unique_ptr<FakeGitHub>(std::move(fake));
}

}  // namespace relay::fake_github
