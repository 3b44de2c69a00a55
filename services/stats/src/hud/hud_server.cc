#include "relay/stats/hud/hud_server.h"

#include <boost/asio/post.hpp>
#include <boost/url.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "relay/base/log.h"
#include "relay/base/random.h"
#include "relay/base/status.h"
#include "relay/stats/hud/html.h"
#include "relay/stats/hud_assets.h"

namespace relay::stats::hud {
namespace bhttp = boost::beast::http;

const char kContentSecurityPolicy[] =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'";

namespace {

const prometheus::Histogram::BucketBoundaries kPageBuckets{0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 1, 2.5, 5};

http::Response Html(unsigned status, std::string body) {
  http::Response r = http::MakeResponse(status, std::move(body), "text/html; charset=utf-8");
  r.set("Content-Security-Policy", kContentSecurityPolicy);
  r.set("X-Content-Type-Options", "nosniff");
  r.set("Referrer-Policy", "no-referrer");
  r.set(bhttp::field::cache_control, "no-cache");
  return r;
}

// An error page: the reason, escaped, in the frame.
http::Response ErrorPage(unsigned status, absl::string_view title, absl::string_view why) {
  return Html(status, Frame(title, "", absl::StrCat("<p class=\"error\">", Escape(why), "</p>")));
}

// An asset: ETag from its content, cached for an hour, 304 on a match.
void AddAsset(http::Router& router, const HudAsset& asset) {
  std::string etag = absl::StrFormat("\"%016x\"", std::hash<std::string_view>{}(asset.body));
  router.Add(bhttp::verb::get, std::string(asset.path), [&asset, etag](http::Request&& req, http::Responder respond) {
    if (req[bhttp::field::if_none_match] == etag) {
      http::Response r = http::MakeResponse(304, "", asset.content_type);
      r.set(bhttp::field::etag, etag);
      respond.Send(std::move(r));
      return;
    }
    http::Response r = http::MakeResponse(200, std::string(asset.body), asset.content_type);
    r.set(bhttp::field::etag, etag);
    r.set(bhttp::field::cache_control, "public, max-age=3600");
    r.set("X-Content-Type-Options", "nosniff");
    respond.Send(std::move(r));
  });
}

}  // namespace

absl::StatusOr<std::unique_ptr<clickhouse::Client>> NewReadOnlyClient(const clickhouse::ClientOptions& options,
                                                                      clickhouse::QueryBounds bounds) {
  RELAY_ASSIGN_OR_RETURN(auto client, clickhouse::Client::New(options));
  client->Bound(std::move(bounds));
  // The user's own profile must forbid writes: a page's SQL is relay's,
  // but a bug or a bound parameter gone wrong must find nothing to change.
  RELAY_ASSIGN_OR_RETURN(std::string readonly,
                         client->Query("SELECT value FROM system.settings WHERE name = 'readonly'"));
  readonly = std::string(absl::StripAsciiWhitespace(readonly));
  if (readonly.empty() || readonly == "0") {
    return absl::FailedPreconditionError(absl::StrCat(
        "hud: ClickHouse user '", options.user,
        "' may write (readonly=0); the HUD reads only as a read-only user (stats.hud_clickhouse_user, "
        "a profile with readonly=2)"));
  }
  return client;
}

HudServer::HudServer(HudOptions options, prometheus::Registry& metrics)
    : options_(std::move(options)),
      clock_(options_.clock ? *options_.clock : system_clock_),
      cache_(options_.cache, clock_),
      id_prefix_("relay-hud-" + RandomHex(4)),
      requests_(prometheus::BuildCounter()
                    .Name("relay_stats_hud_requests_total")
                    .Help("HUD pages served, by page and HTTP status")
                    .Register(metrics)),
      seconds_(prometheus::BuildHistogram()
                   .Name("relay_stats_hud_page_seconds")
                   .Help("Time to render a HUD page (its ClickHouse queries included), by page")
                   .Register(metrics)),
      cache_counter_(prometheus::BuildCounter()
                         .Name("relay_stats_hud_cache_total")
                         .Help("HUD page requests by how they were answered: hit (a kept answer), shared (the "
                               "answer of the same page being made), miss (made for this request)")
                         .Register(metrics)),
      pool_(static_cast<size_t>(options_.threads)) {
  if (options_.pages.empty()) options_.pages = PageRoutes();
}

HudServer::~HudServer() {
  Stop();
  pool_.join();
}

void HudServer::AddRoutes(http::Router& router) {
  for (const PageRoute& page : options_.pages) {
    auto handler = [this, &page](http::Request&& req, http::Responder respond) {
      Serve(page, std::move(req), std::move(respond));
    };
    router.Add(bhttp::verb::get, page.path, handler);
    if (page.path == "/hud") router.Add(bhttp::verb::get, "/hud/", handler);  // as typed
    for (const char* outcome : {"hit", "shared", "miss"}) cache_counter_.Add({{"page", page.label}, {"outcome", outcome}});
  }
  for (const HudAsset& asset : HudAssets()) AddAsset(router, asset);
}

void HudServer::RefreshTierReport(clickhouse::Client& client) {
  if (auto st = tiers_.Refresh(client); !st.ok()) {
    log::Warn("hud: tier report not refreshed", {{"error", st.ToString()}});
  }
}

void HudServer::Serve(const PageRoute& page, http::Request&& request, http::Responder responder) {
  auto deadline = std::chrono::steady_clock::now() + options_.timeout;
  auto url = boost::urls::parse_origin_form(std::string_view(request.target()));
  if (!url) {
    requests_.Add({{"page", page.label}, {"code", "400"}}).Increment();
    responder.Send(ErrorPage(400, "Bad request", "The request's URL does not parse."));
    return;
  }
  Params params;
  for (auto p : url->params()) params[std::string(p.key)] = std::string(p.value);  // decoded; the last wins
  // A window past the bound is refused here, on the event loop: it must
  // not wait for a thread behind the pages being made (each page checks
  // its own, narrower, rules too).
  if (auto days = DaysParam(params, 1, options_.max_days); !days.ok()) {
    requests_.Add({{"page", page.label}, {"code", "400"}}).Increment();
    responder.Send(ErrorPage(400, "Bad request", days.status().message()));
    return;
  }
  // One key per page and parameters, however they were spelled or ordered.
  std::string key = page.path;
  for (const auto& [k, v] : params) absl::StrAppend(&key, "\n", k, "=", v);
  switch (cache_.Join(key, responder)) {
    case PageCache::Role::kAnswered:
      cache_counter_.Add({{"page", page.label}, {"outcome", "hit"}}).Increment();
      requests_.Add({{"page", page.label}, {"code", "200"}}).Increment();
      return;
    case PageCache::Role::kWaiting:
      cache_counter_.Add({{"page", page.label}, {"outcome", "shared"}}).Increment();
      return;  // counted by status when Make answers
    case PageCache::Role::kMake:
      cache_counter_.Add({{"page", page.label}, {"outcome", "miss"}}).Increment();
      break;
  }
  if (waiting_.fetch_add(1) >= options_.max_queued + options_.threads) {
    waiting_.fetch_sub(1);
    http::Response busy = ErrorPage(503, "Busy", "Too many pages are being rendered; try again in a moment.");
    size_t shared = cache_.Finish(key, busy, /*keep=*/false);
    requests_.Add({{"page", page.label}, {"code", "503"}}).Increment(static_cast<double>(1 + shared));
    busy.set("X-Cache", "miss");
    responder.Send(std::move(busy));
    return;
  }
  {
    std::lock_guard lock(pending_mu_);
    pending_.push_back(Job{&page, std::move(key), std::move(params), deadline, std::move(responder)});
  }
  boost::asio::post(pool_, [this] { RunNext(); });
  // Pages that waited their whole budget (behind pages more readers
  // wanted) are answered now, not when a thread is free: their 503 must
  // come before their request's handler deadline. No query runs for them.
  for (Job& expired : TakeExpired()) {
    Make(*expired.page, std::move(expired.key), {}, expired.deadline, std::move(expired.responder));
  }
}

std::vector<HudServer::Job> HudServer::TakeExpired() {
  std::vector<Job> expired;
  auto now = std::chrono::steady_clock::now();
  std::lock_guard lock(pending_mu_);
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->deadline > now) {
      ++it;
      continue;
    }
    expired.push_back(std::move(*it));
    it = pending_.erase(it);
  }
  return expired;
}

void HudServer::RunNext() {
  std::optional<Job> job;
  {
    std::lock_guard lock(pending_mu_);
    // One task per job, but Serve may have answered this one already.
    if (pending_.empty()) return;
    auto best = pending_.begin();
    size_t most = cache_.Waiting(best->key);
    for (auto it = std::next(pending_.begin()); it != pending_.end(); ++it) {
      if (size_t n = cache_.Waiting(it->key); n > most) best = it, most = n;
    }
    job.emplace(std::move(*best));
    pending_.erase(best);
  }
  Make(*job->page, std::move(job->key), std::move(job->params), job->deadline, std::move(job->responder));
}

void HudServer::Make(const PageRoute& page, std::string key, Params params,
                     std::chrono::steady_clock::time_point deadline, http::Responder responder) {
  auto start = std::chrono::steady_clock::now();
  http::Response r;
  if (stopping_) {
    r = ErrorPage(503, "Unavailable", "relay-stats is shutting down; try again in a moment.");
  } else if (start >= deadline) {
    // It waited its whole budget for a thread: its request is about to be
    // given up on, so no query starts for it.
    r = ErrorPage(503, "Busy", "Too many pages are being rendered; try again in a moment.");
  } else {
    try {
      r = Render(page, std::move(params), deadline);
    } catch (const std::exception& e) {  // e.g. bad_alloc: this request fails, not the process
      log::Error("hud page threw", {{"page", page.label}, {"error", e.what()}});
      r = ErrorPage(500, "Error", "The page could not be made; relay-stats' log says why.");
    }
  }
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  seconds_.Add({{"page", page.label}}, kPageBuckets).Observe(took);
  waiting_.fetch_sub(1);
  // Only a page made whole is kept: an error is shared with those waiting
  // for it now, and the next request tries again.
  size_t shared = cache_.Finish(key, r, /*keep=*/r.result_int() == 200);
  // Once per request answered: this one and those that waited for it.
  requests_.Add({{"page", page.label}, {"code", absl::StrCat(r.result_int())}}).Increment(static_cast<double>(1 + shared));
  r.set("X-Cache", "miss");
  responder.Send(std::move(r));
}

http::Response HudServer::Render(const PageRoute& page, Params params, std::chrono::steady_clock::time_point deadline) {
  // Every query of this page: within its budget, killed on the server
  // when the budget runs out.
  clickhouse::QueryBounds bounds{deadline, absl::StrCat(id_prefix_, "-", ++renders_)};
  auto client = Acquire(bounds);
  if (!client.ok()) {
    log::Error("hud: no ClickHouse client", {{"error", client.status().ToString()}});
    return ErrorPage(503, "Unavailable", "No ClickHouse client could be made (see relay-stats' log).");
  }
  PageContext ctx{**client, tiers_, options_.max_days};
  absl::StatusOr<std::string> html = page.render(params, ctx);
  (*client)->Bound({});
  Release(std::move(*client));
  if (html.ok()) return Html(200, std::move(*html));
  const absl::Status& st = html.status();
  if (IsBadParameter(st)) return ErrorPage(400, "Bad request", st.message());
  // Anything else is relay's: ClickHouse could not answer (the reader may
  // try again), or a query failed (a schema not migrated, a bug). The
  // operator finds the reason in the log; the page does not show it (it
  // may hold SQL).
  log::Warn("hud page failed", {{"page", page.label}, {"error", st.ToString()}});
  if (st.code() == absl::StatusCode::kResourceExhausted) {
    return ErrorPage(503, "Too large", "This page would read more than the HUD allows; narrow it (fewer days, one "
                                       "repository) or try again later.");
  }
  if (st.code() == absl::StatusCode::kUnavailable || st.code() == absl::StatusCode::kDeadlineExceeded) {
    return ErrorPage(503, "Unavailable", "ClickHouse did not answer in time; try again in a moment.");
  }
  return ErrorPage(500, "Error", "The page could not be made; relay-stats' log says why.");
}

absl::StatusOr<std::unique_ptr<clickhouse::Client>> HudServer::Acquire(clickhouse::QueryBounds bounds) {
  {
    std::lock_guard lock(clients_mu_);
    if (!clients_.empty()) {
      auto c = std::move(clients_.back());
      clients_.pop_back();
      c->Bound(std::move(bounds));
      return c;
    }
  }
  return NewReadOnlyClient(options_.clickhouse, std::move(bounds));
}

void HudServer::Release(std::unique_ptr<clickhouse::Client> client) {
  std::lock_guard lock(clients_mu_);
  clients_.push_back(std::move(client));
}

}  // namespace relay::stats::hud
