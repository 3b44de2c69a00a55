// What every relay service is made of, apart from its own logic: the
// settings all services share, the I/O edges a host hands it (factories that
// tests replace), and the runtime it registers its routes and readiness
// conditions with. A service implements `Service` and a `Definition`; the
// host (host.h) does the rest: configuration, signals, ops endpoints, the
// port file and the drain sequence, the same way for every service.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "prometheus/registry.h"
#include "relay/base/clock.h"
#include "relay/base/config.h"
#include "relay/http/router.h"
#include "relay/http/server.h"
#include "relay/kafka/admin.h"
#include "relay/kafka/consumer.h"
#include "relay/kafka/follower.h"
#include "relay/kafka/producer.h"
#include "relay/kafka/reader.h"

namespace relay::service {

// The configuration keys each program declares it reads, by program name
// ("relay-dispatch": services/dispatch/config-keys.txt, beside the code
// that reads them), and under "" the keys every service reads (the host's
// and the Kafka client's: libs/service/config-keys.txt). Host::Start
// refuses a service that reads a key its declaration and the common ones
// lack, so a new key cannot be left out of SuiteKeys.
const std::map<std::string, std::set<std::string>>& DeclaredKeys();

// Every configuration key any relay program reads: the union of
// DeclaredKeys. A RELAY_* variable that names one of them belongs to some
// service (environments are often shared), so only variables outside it
// are reported as unknown.
const std::set<std::string>& SuiteKeys();

// Settings every service reads (http.*, log.level).
struct CommonSettings {
  http::ServerOptions http;
  // http.metrics_listen set: /metrics is served there only (not on
  // http.listen), so a NetworkPolicy can open http.listen to readers and
  // the metrics port to the scraper alone (a policy cannot filter paths).
  std::optional<http::ServerOptions> metrics_http;
  // Drain, phase 1: after SIGTERM /readyz answers 503 for this long while
  // the server keeps accepting and serving, so a balancer stops sending.
  std::chrono::milliseconds drain_delay{5'000};
  // Phase 2 and 3: requests in flight finish, then the service's own drain
  // (consumers stop, producers flush), all within this.
  std::chrono::milliseconds drain_timeout{20'000};
  std::string log_level = "info";
};

// Reads http.listen, http.metrics_listen, http.threads, the http timeouts
// and limits, http.drain_delay, http.drain_timeout and log.level. Bad values are
// recorded in `config` (reported by Config::Finish with the rest).
CommonSettings ReadCommonSettings(Config& config);

// Reads the producer keys every service shares (kafka.bootstrap,
// kafka.client_id, kafka.delivery_timeout, kafka.linger,
// kafka.compression), with bounds.
kafka::ProducerOptions ReadProducerOptions(Config& config, const std::string& default_client_id);

// The I/O edges a service gets from its host. The defaults are the real
// clients; tests swap in fakes (libs/kafka/testing) and a FakeClock.
struct Factories {
  std::function<absl::StatusOr<std::unique_ptr<kafka::Producer>>(kafka::ProducerOptions, prometheus::Registry*)>
      producer = kafka::NewKafkaProducer;
  std::function<absl::StatusOr<std::unique_ptr<kafka::Consumer>>(kafka::ConsumerOptions, kafka::Producer*,
                                                                 prometheus::Registry*)>
      consumer = kafka::NewKafkaConsumer;
  std::function<absl::StatusOr<std::unique_ptr<kafka::Admin>>(const std::string& bootstrap,
                                                              const std::string& client_id)>
      admin = kafka::NewKafkaAdmin;
  std::function<absl::StatusOr<std::unique_ptr<kafka::TopicReader>>(const std::string& bootstrap)> reader =
      [](const std::string& bootstrap) {
        kafka::ReaderOptions o;
        o.bootstrap = bootstrap;
        return kafka::NewKafkaTopicReader(o);
      };
  kafka::FollowerFactory follower = kafka::NewKafkaFollower;
  const Clock* clock = nullptr;  // the system clock when null
};

// What a running service is handed by its host. Routes and readiness checks
// are added while the service starts (before the server listens).
class Runtime {
 public:
  virtual ~Runtime() = default;
  virtual prometheus::Registry& metrics() = 0;
  virtual http::Router& router() = 0;
  virtual const Clock& clock() const = 0;
  virtual const Factories& factories() const = 0;
  // /readyz answers 200 only while every check returns OK and the host is
  // not draining; otherwise 503 naming each failing check and its reason.
  // Checks run on HTTP threads: they must be quick (read a cached result).
  virtual void AddReadinessCheck(std::string name, std::function<absl::Status()> check) = 0;
  // Runs `task` on a thread of the host now and then every `interval` until
  // the host shuts down (slow checks whose result a readiness check reads).
  virtual void Every(std::chrono::milliseconds interval, std::function<void()> task) = 0;
  // A part of the service stopped for good (a consumer loop that ended with
  // an error, a thread that cannot go on): the process must not look alive.
  // Logs it, /healthz and /readyz answer 503 naming `component` and `why`
  // from then on, and the process drains and exits 1 (service::Main), so an
  // orchestrator restarts it. Any thread; idempotent per component.
  virtual void Fatal(const std::string& component, const absl::Status& why) = 0;
};

class Service {
 public:
  virtual ~Service() = default;
  // Called once the HTTP server has drained (no request in flight): stop
  // consuming, flush producers, within `budget`. False when something could
  // not finish in time. The service is destroyed after this, before the
  // server.
  virtual bool Drain(std::chrono::milliseconds budget) = 0;
};

// The last step of most Drains: flushes `producer` within what is left
// until `deadline`, at least 1 s (records already accepted deserve a try),
// and logs an incomplete flush. False when records were left unflushed.
bool FlushBefore(kafka::Producer& producer, std::chrono::steady_clock::time_point deadline);

// The Drain of a service that consumes: `stop` (servers and consumers stop,
// offsets are committed), then `producer` flushed within what is left of
// `budget` (FlushBefore).
bool StopThenFlush(std::chrono::milliseconds budget, const std::function<void()>& stop, kafka::Producer& producer);

// Starts the service on a runtime.
using Starter = absl::AnyInvocable<absl::StatusOr<std::unique_ptr<Service>>(Runtime&)>;

struct Definition {
  std::string name;  // the binary's name, e.g. "relay-intake"
  // Reads the service's own keys from the config (the host read the common
  // ones) and returns how to start it. Errors are either returned or
  // recorded in the config (Config::Fail) to be reported with the others.
  absl::AnyInvocable<absl::StatusOr<Starter>(Config&, const CommonSettings&)> configure;
};

// A service made by `new` and then wired (its clients, routes, readiness
// checks and tasks) by its `absl::Status Wire(Runtime&)`: the service, or
// Wire's error (the half-wired service destroyed). What a Start returns.
template <typename S>
absl::StatusOr<std::unique_ptr<Service>> Wired(std::unique_ptr<S> service, Runtime& runtime) {
  if (absl::Status s = service->Wire(runtime); !s.ok()) return s;
  return std::unique_ptr<Service>(std::move(service));
}

// The Definition of a service named `name` whose settings `load` reads
// (Config&, const CommonSettings&) -> absl::StatusOr<Settings>, and which
// `start` starts (Settings, Runtime&) -> absl::StatusOr<std::unique_ptr<Service>>.
template <typename Load, typename Start>
Definition Define(std::string name, Load load, Start start) {
  return {std::move(name), [load, start](Config& config, const CommonSettings& common) -> absl::StatusOr<Starter> {
            auto settings = load(config, common);
            if (!settings.ok()) return settings.status();
            return Starter([settings = *std::move(settings), start](Runtime& runtime) mutable {
              return start(std::move(settings), runtime);
            });
          }};
}

}  // namespace relay::service
