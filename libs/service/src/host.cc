#include "relay/service/host.h"

#include <signal.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/str_join.h"
#include "prometheus/gauge.h"
#include "relay/base/log.h"
#include "relay/base/signals.h"
#include "relay/base/status.h"
#include "relay/kafka/security.h"

namespace relay::service {

const std::set<std::string>& SuiteKeys() {
  static const std::set<std::string> kKeys = [] {
    std::set<std::string> all;
    for (const auto& [program, keys] : DeclaredKeys()) all.insert(keys.begin(), keys.end());
    return all;
  }();
  return kKeys;
}

using std::chrono::milliseconds;
using namespace std::chrono_literals;

bool FlushBefore(kafka::Producer& producer, std::chrono::steady_clock::time_point deadline) {
  auto left = std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
  absl::Status flushed = producer.Flush(std::max(left, milliseconds(1000)));
  if (!flushed.ok()) log::Error("producer flush incomplete", {{"error", std::string(flushed.message())}});
  return flushed.ok();
}

bool StopThenFlush(std::chrono::milliseconds budget, const std::function<void()>& stop, kafka::Producer& producer) {
  auto deadline = std::chrono::steady_clock::now() + budget;
  stop();
  return FlushBefore(producer, deadline);
}

CommonSettings ReadCommonSettings(Config& config) {
  CommonSettings s;
  if (auto st = http::ParseListenAddress(config.String("http.listen", "127.0.0.1:8080"), &s.http); !st.ok()) {
    config.Fail("http.listen", std::string(st.message()));
  }
  s.http.threads = static_cast<int>(config.Int("http.threads", 2, 1, 256));
  s.http.header_timeout = config.Duration("http.header_timeout", 10s, 100ms, 10min);
  s.http.idle_timeout = config.Duration("http.idle_timeout", 75s, 1s, 1h);
  s.http.body_timeout = config.Duration("http.body_timeout", 30s, 100ms, 1h);
  s.http.handler_timeout = config.Duration("http.handler_timeout", 15s, 100ms, 1h);
  s.http.max_connections = config.Int("http.max_connections", 10'000, 1, 1'000'000);
  s.http.max_body_bytes_in_flight =
      config.Bytes("http.max_body_bytes_in_flight", 256LL * 1024 * 1024, 64 * 1024, 64LL * 1024 * 1024 * 1024);
  s.drain_delay = config.Duration("http.drain_delay", 5s, 0ms, 5min);
  // At least 1 s: zero would cut off every request in flight.
  s.drain_timeout = config.Duration("http.drain_timeout", 20s, 1s, 10min);
  // A request held by its handler gets its answer (at worst the 503 of the
  // handler deadline) within handler_timeout; a drain shorter than that
  // would cut it off without one.
  if (s.http.handler_timeout > s.drain_timeout) {
    config.Fail("http.handler_timeout", "must not exceed http.drain_timeout (" +
                                            std::to_string(s.drain_timeout.count()) +
                                            " ms): a request held through the drain would be cut off unanswered");
  }
  if (std::string listen = config.String("http.metrics_listen", ""); !listen.empty()) {
    // The same limits and deadlines; one event loop is plenty for scrapes.
    http::ServerOptions metrics = s.http;
    metrics.threads = 1;
    if (auto st = http::ParseListenAddress(listen, &metrics); !st.ok()) {
      config.Fail("http.metrics_listen", std::string(st.message()));
    } else if (metrics.host == s.http.host && metrics.port == s.http.port && metrics.port != 0) {
      config.Fail("http.metrics_listen", "must differ from http.listen");
    }
    s.metrics_http = metrics;
  }
  s.log_level = config.String("log.level", "info");
  log::Level level;
  if (!log::ParseLevel(s.log_level, &level)) config.Fail("log.level", "'" + s.log_level + "' is not debug|info|warn|error");
  return s;
}

kafka::ProducerOptions ReadProducerOptions(Config& config, const std::string& default_client_id) {
  kafka::ProducerOptions o;
  o.bootstrap = config.RequiredString("kafka.bootstrap");
  o.client_id = config.String("kafka.client_id", default_client_id);
  // Zero would mean "wait forever" to librdkafka: the bound is part of every
  // service's answer to its callers.
  o.delivery_timeout = config.Duration("kafka.delivery_timeout", 5s, 100ms, 5min);
  o.linger = config.Duration("kafka.linger", 1ms, 0ms, 1s);
  o.compression = config.String("kafka.compression", "lz4");
  static const char* kCodecs[] = {"none", "gzip", "snappy", "lz4", "zstd"};
  if (std::find(std::begin(kCodecs), std::end(kCodecs), o.compression) == std::end(kCodecs)) {
    config.Fail("kafka.compression", "'" + o.compression + "' is not none|gzip|snappy|lz4|zstd");
  }
  return o;
}

namespace {

class HostImpl final : public Host, public Runtime {
 public:
  HostImpl(std::string name, CommonSettings settings, Factories factories)
      : name_(std::move(name)),
        settings_(std::move(settings)),
        factories_(std::move(factories)),
        ready_gauge_(prometheus::BuildGauge()
                         .Name("relay_service_ready")
                         .Help("1 while /readyz answers 200")
                         .Register(registry_)
                         .Add({})),
        fatal_gauge_(prometheus::BuildGauge()
                         .Name("relay_service_fatal")
                         .Help("1 once a part of the service stopped for good (/healthz answers 503; the process exits)")
                         .Register(registry_)
                         .Add({})) {}

  ~HostImpl() override {
    Shutdown();
  }

  absl::Status Start(Starter starter) {
    RELAY_ASSIGN_OR_RETURN(service_, starter(*this));
    if (settings_.metrics_http) {
      http::AddHealthRoutes(router_, [this] { return Ready(); }, [this] { return Live(); });
      http::AddMetricsRoute(metrics_router_, registry_);
      RELAY_ASSIGN_OR_RETURN(metrics_server_,
                             http::Server::Start(*settings_.metrics_http, metrics_router_.AsHandler(), nullptr));
      log::Info(name_ + " serving /metrics", {{"host", settings_.metrics_http->host}, {"port", metrics_server_->port()}});
    } else {
      http::AddOpsRoutes(router_, registry_, [this] { return Ready(); }, [this] { return Live(); });
    }
    http::ServerOptions options = settings_.http;
    options.body_limit = router_.MaxBodyLimit();
    if (options.max_body_bytes_in_flight < static_cast<int64_t>(options.body_limit)) {
      // A body the route takes could never fit the budget: it would get 503
      // + Retry-After forever instead of being served.
      return absl::InvalidArgumentError(
          "http.max_body_bytes_in_flight (" + std::to_string(options.max_body_bytes_in_flight) +
          ") must be at least the largest route body limit (" + std::to_string(options.body_limit) + ")");
    }
    options.body_limit_for = router_.AsBodyLimitFunction();
    options.stream_for = router_.AsStreamFunction();
    RELAY_ASSIGN_OR_RETURN(server_, http::Server::Start(options, router_.AsHandler(), &registry_));
    log::Info(name_ + " listening", {{"host", options.host}, {"port", server_->port()}});
    return absl::OkStatus();
  }

  // Runtime
  prometheus::Registry& metrics() override { return registry_; }
  http::Router& router() override { return router_; }
  const Clock& clock() const override { return factories_.clock ? *factories_.clock : system_clock_; }
  const Factories& factories() const override { return factories_; }
  void AddReadinessCheck(std::string name, std::function<absl::Status()> check) override {
    std::lock_guard lock(mu_);
    checks_.emplace_back(std::move(name), std::move(check));
  }
  void Every(milliseconds interval, std::function<void()> task) override {
    std::lock_guard lock(mu_);
    tasks_.emplace_back([this, interval, task = std::move(task)] {
      std::unique_lock held(mu_);
      while (!stopping_) {
        held.unlock();
        task();
        held.lock();
        stop_cv_.wait_for(held, interval, [this] { return stopping_; });
      }
    });
  }

  // Host
  uint16_t port() const override { return server_ ? server_->port() : 0; }
  uint16_t metrics_port() const override { return metrics_server_ ? metrics_server_->port() : 0; }
  Runtime& runtime() override { return *this; }

  void Fatal(const std::string& component, const absl::Status& why) override {
    std::function<void()> handler;
    {
      std::lock_guard lock(mu_);
      if (!fatal_.emplace(component, std::string(why.message())).second) return;
      if (!fatal_reported_) {
        fatal_reported_ = true;
        handler = on_fatal_;
      }
    }
    log::Error("a part of the service stopped for good; the process will exit",
               {{"component", component}, {"error", std::string(why.message())}});
    fatal_gauge_.Set(1);
    if (handler) handler();
  }

  void OnFatal(std::function<void()> handler) override {
    bool now;
    {
      std::lock_guard lock(mu_);
      on_fatal_ = handler;
      now = fatal_reported_;
    }
    if (now && handler) handler();
  }

  absl::Status Live() const override {
    std::lock_guard lock(mu_);
    if (fatal_.empty()) return absl::OkStatus();
    std::vector<std::string> reasons;
    for (const auto& [component, why] : fatal_) reasons.push_back(component + " stopped: " + why);
    return absl::UnavailableError(absl::StrJoin(reasons, "; "));
  }

  absl::Status Ready() const override {
    std::vector<std::string> reasons;
    if (draining_.load()) reasons.push_back("draining (shutting down)");
    if (absl::Status live = Live(); !live.ok()) reasons.push_back(std::string(live.message()));
    {
      std::lock_guard lock(mu_);
      for (const auto& [name, check] : checks_) {
        if (absl::Status s = check(); !s.ok()) reasons.push_back(name + ": " + std::string(s.message()));
      }
    }
    ready_gauge_.Set(reasons.empty() ? 1 : 0);
    if (reasons.empty()) return absl::OkStatus();
    return absl::UnavailableError(absl::StrJoin(reasons, "; "));
  }

  bool Shutdown() override {
    if (shut_down_.exchange(true)) return clean_;
    clean_ = true;
    if (server_) {
      // 1. Readiness off, still serving.
      draining_ = true;
      log::Info("draining: readiness off, still serving", {{"delay_ms", settings_.drain_delay.count()}});
      std::this_thread::sleep_for(settings_.drain_delay);
      // 2. Listener closed, requests in flight finish.
      auto start = std::chrono::steady_clock::now();
      log::Info("draining: listener closed, finishing requests in flight",
                {{"deadline_ms", settings_.drain_timeout.count()}});
      // False (and logged by the server with the count) when connections
      // were cut off at the deadline.
      if (!server_->Shutdown(settings_.drain_timeout)) clean_ = false;
      // 3. The service's own drain with what is left.
      auto left = settings_.drain_timeout - std::chrono::duration_cast<milliseconds>(
                                                std::chrono::steady_clock::now() - start);
      if (service_ && !service_->Drain(std::max(left, milliseconds(1000)))) {
        clean_ = false;
        log::Error("drain incomplete: the service could not finish in time");
      }
    }
    StopTasks();
    // 4. The service (its producers' callbacks may still hold Responders)
    // before the server; the scraper's listener last (it saw the drain).
    service_.reset();
    server_.reset();
    if (metrics_server_) metrics_server_->Shutdown(milliseconds(1000));
    metrics_server_.reset();
    if (clean_) log::Info("drained");
    return clean_;
  }

 private:
  void StopTasks() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    stop_cv_.notify_all();
    std::vector<std::thread> tasks;
    {
      std::lock_guard lock(mu_);
      tasks.swap(tasks_);
    }
    for (auto& t : tasks) t.join();
  }

  std::string name_;
  CommonSettings settings_;
  Factories factories_;
  SystemClock system_clock_;
  prometheus::Registry registry_;
  prometheus::Gauge& ready_gauge_;
  prometheus::Gauge& fatal_gauge_;
  http::Router router_;
  mutable std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::vector<std::pair<std::string, std::function<absl::Status()>>> checks_;
  std::vector<std::thread> tasks_;
  std::map<std::string, std::string> fatal_;  // component -> why (Fatal)
  bool fatal_reported_ = false;
  std::function<void()> on_fatal_;
  std::atomic<bool> draining_{false};
  std::atomic<bool> shut_down_{false};
  bool clean_ = true;
  http::Router metrics_router_;  // /metrics alone, with http.metrics_listen
  std::unique_ptr<http::Server> metrics_server_;
  // Declared last, destroyed first (Shutdown resets them in this order too).
  std::unique_ptr<http::Server> server_;
  std::unique_ptr<Service> service_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Host>> Host::Start(Definition definition, Config config, Factories factories) {
  CommonSettings common = ReadCommonSettings(config);
  // Before the service makes its first Kafka client (kafka/security.h: one
  // security setting per process).
  kafka::Security kafka_security = kafka::ReadSecurity(config);
  absl::StatusOr<Starter> starter = definition.configure(config, common);
  // A key the service read but did not declare would be unknown to the
  // other programs' checks: refused here, so no such key can ship.
  if (auto own = DeclaredKeys().find(definition.name); own != DeclaredKeys().end()) {
    const std::set<std::string>& every = DeclaredKeys().at("");
    for (const std::string& key : config.keys_read()) {
      if (!own->second.count(key) && !every.count(key)) {
        config.Fail(key, "read by " + definition.name + " but not declared in its config-keys.txt");
      }
    }
  }
  // Every configuration problem at once: the service's own error (if it
  // returned one) and all that the config recorded.
  config.AlsoKnown(SuiteKeys());
  absl::Status finished = config.Finish();
  if (!starter.ok() || !finished.ok()) {
    std::string message;
    if (!starter.ok()) message = std::string(starter.status().message());
    if (!finished.ok()) message += (message.empty() ? "" : "\n") + std::string(finished.message());
    return absl::InvalidArgumentError(message);
  }
  kafka::SetSecurity(std::move(kafka_security));
  log::Level level = log::Level::kInfo;
  log::ParseLevel(common.log_level, &level);
  log::SetLevel(level);
  auto host = std::make_unique<HostImpl>(definition.name, std::move(common), std::move(factories));
  if (absl::Status s = host->Start(std::move(*starter)); !s.ok()) return s;
  return std::unique_ptr<Host>(std::move(host));
}

int Main(int argc, char** argv, Definition definition) {
  BlockShutdownSignals();
  std::string config_path, port_file;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if ((arg == "--config" || arg == "--port-file") && i + 1 < argc) {
      (arg == "--config" ? config_path : port_file) = argv[++i];
    } else if (arg == "--help" || arg == "-h") {
      std::cout << "usage: " << definition.name << " [--config FILE] [--port-file FILE]\n"
                << "Every setting can also come from RELAY_* environment variables.\n";
      return 0;
    } else {
      std::cerr << definition.name << ": unknown argument " << arg << "\n";
      return 2;
    }
  }
  auto config = Config::Load(config_path, Config::ProcessEnvironment());
  if (!config.ok()) {
    log::Error("bad configuration", {{"error", std::string(config.status().message())}});
    return 2;
  }
  auto host = Host::Start(std::move(definition), std::move(*config));
  if (!host.ok()) {
    bool config_error = absl::IsInvalidArgument(host.status());
    log::Error(config_error ? "bad configuration" : "start failed", {{"error", std::string(host.status().message())}});
    return config_error ? 2 : 1;
  }
  if (!port_file.empty()) {
    // Written only once we listen, and atomically, so a launcher can wait.
    std::string tmp = port_file + ".tmp";
    std::ofstream(tmp) << (*host)->port() << "\n";
    std::rename(tmp.c_str(), port_file.c_str());
  }
  // A Fatal wakes the wait below as a signal would (shutdown signals are
  // blocked in every thread and taken by sigwait).
  (*host)->OnFatal([] { ::kill(::getpid(), SIGTERM); });
  int sig = WaitForShutdownSignal();
  bool fatal = !(*host)->Live().ok();
  if (fatal) {
    log::Error("shutting down: a part of the service stopped", {{"error", std::string((*host)->Live().message())}});
  } else {
    log::Info("shutdown signal", {{"signal", strsignal(sig)}});
  }
  bool clean = (*host)->Shutdown();
  host->reset();
  return clean && !fatal ? 0 : 1;
}

}  // namespace relay::service
