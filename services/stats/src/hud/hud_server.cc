#include "relay/stats/hud/hud_server.h"

#include <boost/asio/post.hpp>
#include <boost/url.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "relay/base/log.h"
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

HudServer::HudServer(HudOptions options, prometheus::Registry& metrics)
    : options_(std::move(options)),
      requests_(prometheus::BuildCounter()
                    .Name("relay_stats_hud_requests_total")
                    .Help("HUD pages served, by page and HTTP status")
                    .Register(metrics)),
      seconds_(prometheus::BuildHistogram()
                   .Name("relay_stats_hud_page_seconds")
                   .Help("Time to render a HUD page (its ClickHouse queries included), by page")
                   .Register(metrics)),
      pool_(static_cast<size_t>(options_.threads)) {}

HudServer::~HudServer() {
  Stop();
  pool_.join();
}

void HudServer::AddRoutes(http::Router& router) {
  for (const PageRoute& page : PageRoutes()) {
    auto handler = [this, &page](http::Request&& req, http::Responder respond) {
      Serve(page, std::move(req), std::move(respond));
    };
    router.Add(bhttp::verb::get, page.path, handler);
    if (page.path == "/hud") router.Add(bhttp::verb::get, "/hud/", handler);  // as typed
  }
  for (const HudAsset& asset : HudAssets()) AddAsset(router, asset);
}

void HudServer::RefreshTierReport(clickhouse::Client& client) {
  if (auto st = tiers_.Refresh(client); !st.ok()) {
    log::Warn("hud: tier report not refreshed", {{"error", st.ToString()}});
  }
}

void HudServer::Serve(const PageRoute& page, http::Request&& request, http::Responder responder) {
  if (waiting_.fetch_add(1) >= options_.max_queued + options_.threads) {
    waiting_.fetch_sub(1);
    requests_.Add({{"page", page.label}, {"code", "503"}}).Increment();
    responder.Send(ErrorPage(503, "Busy", "Too many pages are being rendered; try again in a moment."));
    return;
  }
  boost::asio::post(pool_, [this, &page, request = std::move(request), responder = std::move(responder)]() mutable {
    auto start = std::chrono::steady_clock::now();
    http::Response r;
    if (stopping_) {
      r = ErrorPage(503, "Unavailable", "relay-stats is shutting down; try again in a moment.");
    } else {
      try {
        r = Render(page, request);
      } catch (const std::exception& e) {  // e.g. bad_alloc: this request fails, not the process
        log::Error("hud page threw", {{"page", page.label}, {"error", e.what()}});
        r = ErrorPage(500, "Error", "The page could not be made; relay-stats' log says why.");
      }
    }
    double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    seconds_.Add({{"page", page.label}}, kPageBuckets).Observe(took);
    requests_.Add({{"page", page.label}, {"code", absl::StrCat(r.result_int())}}).Increment();
    waiting_.fetch_sub(1);
    responder.Send(std::move(r));
  });
}

http::Response HudServer::Render(const PageRoute& page, const http::Request& request) {
  auto url = boost::urls::parse_origin_form(std::string_view(request.target()));
  if (!url) return ErrorPage(400, "Bad request", "The request's URL does not parse.");
  Params params;
  for (auto p : url->params()) params[std::string(p.key)] = std::string(p.value);  // decoded; the last wins
  auto client = Acquire();
  if (!client) return ErrorPage(503, "Unavailable", "No ClickHouse client could be made (see relay-stats' log).");
  PageContext ctx{*client, tiers_};
  absl::StatusOr<std::string> html = page.render(params, ctx);
  Release(std::move(client));
  if (html.ok()) return Html(200, std::move(*html));
  const absl::Status& st = html.status();
  if (IsBadParameter(st)) return ErrorPage(400, "Bad request", st.message());
  // Anything else is relay's: ClickHouse could not answer (the reader may
  // try again), or a query failed (a schema not migrated, a bug). The
  // operator finds the reason in the log; the page does not show it (it
  // may hold SQL).
  log::Warn("hud page failed", {{"page", page.label}, {"error", st.ToString()}});
  if (st.code() == absl::StatusCode::kUnavailable || st.code() == absl::StatusCode::kDeadlineExceeded ||
      st.code() == absl::StatusCode::kResourceExhausted) {
    return ErrorPage(503, "Unavailable", "ClickHouse did not answer in time; try again in a moment.");
  }
  return ErrorPage(500, "Error", "The page could not be made; relay-stats' log says why.");
}

std::unique_ptr<clickhouse::Client> HudServer::Acquire() {
  {
    std::lock_guard lock(clients_mu_);
    if (!clients_.empty()) {
      auto c = std::move(clients_.back());
      clients_.pop_back();
      return c;
    }
  }
  auto c = clickhouse::Client::New(options_.clickhouse);
  if (!c.ok()) {
    log::Error("hud: no ClickHouse client", {{"error", c.status().ToString()}});
    return nullptr;
  }
  return std::move(*c);
}

void HudServer::Release(std::unique_ptr<clickhouse::Client> client) {
  std::lock_guard lock(clients_mu_);
  clients_.push_back(std::move(client));
}

}  // namespace relay::stats::hud
