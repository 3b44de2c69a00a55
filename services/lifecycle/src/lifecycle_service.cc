#include "relay/lifecycle/lifecycle_service.h"

#include <unistd.h>

#include <mutex>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "relay/base/log.h"
#include "relay/base/random.h"
#include "relay/base/status.h"
#include "relay/lifecycle/leader.h"
#include "relay/lifecycle/kubernetes_provider.h"
#include "relay/lifecycle/local_provider.h"
#include "relay/lifecycle/pools.h"

namespace relay::lifecycle {
namespace {

using namespace std::chrono_literals;

class LifecycleService final : public service::Service {
 public:
  explicit LifecycleService(LifecycleSettings s) : s_(std::move(s)) {}

  absl::Status Wire(service::Runtime& runtime) {
    auto& metrics = runtime.metrics();
    // Who may call.
    std::vector<auth::ServiceToken> tokens;
    if (!s_.tokens_file.empty()) {
      RELAY_ASSIGN_OR_RETURN(tokens, auth::LoadServiceTokens(s_.tokens_file));
    }
    std::unique_ptr<auth::OidcVerifier> oidc;
    RELAY_ASSIGN_OR_RETURN(std::vector<auth::OidcIssuer> issuers, auth::OidcIssuers(s_.oidc));
    if (!issuers.empty()) {
      RELAY_ASSIGN_OR_RETURN(oidc, auth::OidcVerifier::New(std::move(issuers), {}, &runtime.clock()));
      if (auto st = oidc->Prefetch(); !st.ok()) log::Warn("JWKS not loaded at start", {{"error", std::string(st.message())}});
    }
    RELAY_ASSIGN_OR_RETURN(callers_, auth::CallerAuthenticator::New(std::move(tokens), std::move(oidc), s_.oidc_allow));
    if (callers_->oidc()) {
      runtime.Every(60s, [this] {
        if (auto st = callers_->oidc()->RefreshStale(); !st.ok()) log::Warn("JWKS refresh failed", {{"error", std::string(st.message())}});
      });
    }

    RELAY_ASSIGN_OR_RETURN(reader_, runtime.factories().reader(s_.kafka.bootstrap));
    for (const std::string* t : {&s_.controller.clusters_topic, &s_.controller.events_topic, &s_.leader_topic}) {
      if (auto n = reader_->Partitions(*t); !n.ok()) {
        return absl::FailedPreconditionError("topic " + *t + ": " + std::string(n.status().message()) +
                                             " (create it: deploy/kafka/topics.txt)");
      }
    }
    if (auto n = reader_->Partitions(s_.leader_topic); n.ok() && *n != 1) {
      return absl::FailedPreconditionError(absl::StrCat(s_.leader_topic, " has ", *n, " partitions; leadership needs exactly 1"));
    }
    if (s_.provider == "kubernetes") {
      KubernetesOptions k = s_.kubernetes;
      k.owner = s_.owner;
      k.log_dir = s_.state_dir + "/logs";
      RELAY_ASSIGN_OR_RETURN(provider_, NewKubernetesProvider(std::move(k)));
    } else {
      LocalProviderOptions lp;
      lp.state_dir = s_.state_dir;
      lp.owner = s_.owner;
      lp.ray_bin = s_.ray_bin;
      lp.runtime_dir = s_.runtime_dir;
      lp.team = s_.local_team;
      lp.run_as = s_.local_run_as;
      if (!s_.ray_temp_root.empty()) lp.ray_temp_root = s_.ray_temp_root;
      lp.uid_first = s_.uid_first;
      lp.uid_last = s_.uid_last;
      RELAY_ASSIGN_OR_RETURN(provider_, NewLocalProvider(lp));
    }
    controller_ = std::make_unique<Controller>(s_.controller, provider_.get(), reader_.get(), &runtime.clock(),
                                               &metrics);
    RELAY_ASSIGN_OR_RETURN(grpc_, GrpcApi::Start(s_.grpc_listen, s_.tls, controller_.get(), callers_.get(), &metrics));
    log::Info("gRPC listening", {{"listen", s_.grpc_listen}, {"port", grpc_->port()}, {"tls", !s_.tls.cert_file.empty()}});
    prometheus::BuildGauge()
        .Name("relay_lifecycle_grpc_port")
        .Help("The port the gRPC API listens on")
        .Register(metrics)
        .Add({})
        .Set(grpc_->port());

    LeaderOptions lo;
    lo.bootstrap = s_.kafka.bootstrap;
    lo.topic = s_.leader_topic;
    lo.group_id = s_.group_id;
    lo.session_timeout = s_.leader_session_timeout;
    lo.heartbeat_interval = std::max<std::chrono::milliseconds>(s_.leader_session_timeout / 6, 100ms);
    char host[256] = {0};
    ::gethostname(host, sizeof host - 1);
    lo.instance = absl::StrCat(host, ":", ::getpid(), ":", RandomHex(4));
    // The leader's writer: a transactional producer of one fixed id per
    // installation (its election group), made at every takeover. Making it
    // fences the previous leader's at the broker, so a deposed leader that
    // still believes it leads cannot write a record compaction might keep.
    kafka::ProducerOptions writer_options = s_.kafka;
    writer_options.transactional_id = s_.group_id + ".leader";
    auto make_writer = [this, writer_options, &runtime, &metrics] {
      return runtime.factories().producer(writer_options, &metrics);
    };
    RELAY_ASSIGN_OR_RETURN(elector_, LeaderElector::Start(lo, LeaderCallbacks{
                                                                  [this, make_writer](int64_t epoch) -> absl::Status {
                                                                    RELAY_ASSIGN_OR_RETURN(auto writer, make_writer());
                                                                    kafka::Producer* w = writer.get();
                                                                    {
                                                                      std::lock_guard lock(writer_mu_);
                                                                      writer_ = std::move(writer);
                                                                    }
                                                                    if (auto st = controller_->TakeOver(epoch, w); !st.ok()) {
                                                                      DropWriter();
                                                                      return st;
                                                                    }
                                                                    grpc_->SetServing(true);
                                                                    return absl::OkStatus();
                                                                  },
                                                                  [this] {
                                                                    grpc_->SetServing(false);
                                                                    controller_->StepDown();
                                                                    DropWriter();
                                                                  }}));
    runtime.AddReadinessCheck("leader", [this]() -> absl::Status {
      if (!controller_->leading()) {
        absl::Status e = elector_->Health();
        return absl::UnavailableError(e.ok() ? "standby (another instance leads)" : "standby: " + std::string(e.message()));
      }
      return controller_->Health();
    });
    if (!s_.pools_file.empty()) {
      RELAY_ASSIGN_OR_RETURN(std::vector<PoolSpec> pools, LoadPools(s_.pools_file));
      for (const auto& p : pools) {
        // Checked now rather than at the pool's first scale-up.
        if (auto st = provider_->Supports(PoolClusterSpec(p)); !st.ok()) {
          return absl::InvalidArgumentError("runner pool " + p.name + ": " + std::string(st.message()));
        }
      }
      log::Info("runner pools", {{"pools", static_cast<int64_t>(pools.size())}, {"webhooks", s_.webhooks_topic}});
      RELAY_ASSIGN_OR_RETURN(pools_, PoolManager::Start(std::move(pools), s_.kafka.bootstrap, s_.webhooks_topic,
                                                        controller_.get(), &runtime.clock(), &metrics,
                                                        runtime.factories().follower));
      runtime.Every(1s, [this] { pools_->Tick(); });
      runtime.AddReadinessCheck("pools", [this] { return pools_->Health(); });
    }
    runtime.AddReadinessCheck("kafka", [this]() -> absl::Status {
      std::lock_guard lock(writer_mu_);
      // A standby has no writer (and fails the leader check above).
      return !writer_ || writer_->Connected() ? absl::OkStatus() : absl::UnavailableError("no broker connection");
    });
    return absl::OkStatus();
  }

  bool Drain(std::chrono::milliseconds budget) override {
    auto deadline = std::chrono::steady_clock::now() + budget;
    // Leave the group first: a standby takes over at once. Clusters keep
    // running; the next leader adopts them. (Pool rounds stop acting with
    // the leadership.)
    if (elector_) elector_->Stop();
    if (controller_) controller_->StepDown();
    if (grpc_) grpc_->Shutdown(budget / 4);
    std::unique_ptr<kafka::Producer> writer;
    {
      std::lock_guard lock(writer_mu_);
      writer = std::move(writer_);
    }
    return !writer || service::FlushBefore(*writer, deadline);
  }

 private:
  // After StepDown: what was sent lands (or fails), then the writer goes.
  void DropWriter() {
    std::unique_ptr<kafka::Producer> writer;
    {
      std::lock_guard lock(writer_mu_);
      writer = std::move(writer_);
    }
    if (writer) (void)writer->Flush(s_.kafka.delivery_timeout * 2);
  }

  LifecycleSettings s_;
  std::unique_ptr<auth::CallerAuthenticator> callers_;
  std::mutex writer_mu_;
  std::unique_ptr<kafka::Producer> writer_;  // the leadership's (transactional) writer
  std::unique_ptr<kafka::TopicReader> reader_;
  std::unique_ptr<NodeProvider> provider_;
  std::unique_ptr<Controller> controller_;
  std::unique_ptr<GrpcApi> grpc_;
  std::unique_ptr<LeaderElector> elector_;
  std::unique_ptr<PoolManager> pools_;
};

}  // namespace

absl::StatusOr<LifecycleSettings> LoadSettings(Config& config) {
  LifecycleSettings s;
  s.kafka = service::ReadProducerOptions(config, "relay-lifecycle");
  s.group_id = config.String("kafka.group_id", "relay-lifecycle");
  s.leader_session_timeout = config.Duration("lifecycle.leader_session_timeout", 6s, 6s, 5min);
  s.grpc_listen = config.String("grpc.listen", s.grpc_listen);
  s.provider = config.String("lifecycle.provider", "local");
  if (s.provider != "local" && s.provider != "kubernetes") {
    config.Fail("lifecycle.provider", "'" + s.provider + "' is not local or kubernetes");
  }
  s.kubernetes.api_url = config.String("lifecycle.kubernetes.api_url", "");
  s.kubernetes.token_file = config.String("lifecycle.kubernetes.token_file", "");
  s.kubernetes.ca_file = config.String("lifecycle.kubernetes.ca_file", "");
  s.kubernetes.namespace_ = config.String("lifecycle.kubernetes.namespace", "");
  s.kubernetes.image = config.String("lifecycle.kubernetes.image", s.kubernetes.image);
  s.kubernetes.ray_image = config.String("lifecycle.kubernetes.ray_image", s.kubernetes.ray_image);
  s.kubernetes.ray_auth = config.String("lifecycle.kubernetes.ray_auth", s.kubernetes.ray_auth);
  if (s.kubernetes.ray_auth != "token" && s.kubernetes.ray_auth != "none") {
    config.Fail("lifecycle.kubernetes.ray_auth", "'" + s.kubernetes.ray_auth + "' is not token or none");
  }
  s.tokens_file = config.String("lifecycle.tokens_file", "");
  s.oidc = auth::ReadOidcSettings(config, "lifecycle");
  if (!config.String("lifecycle.oidc.team_claim", "").empty()) {
    config.Fail("lifecycle.oidc.team_claim", "removed: a claim never names a team (anyone can register an "
                                             "organisation named like one); map owners to teams in lifecycle.oidc.allow");
  }
  auto rules = auth::ParseOidcCallerRules(config.StringList("lifecycle.oidc.allow"), s.oidc.issuer);
  if (!rules.ok()) {
    config.Fail("lifecycle.oidc.allow", std::string(rules.status().message()));
  } else {
    s.oidc_allow = std::move(*rules);
  }
  bool oidc_on = !s.oidc.audience.empty() || !s.oidc.providers_file.empty();
  if (oidc_on && s.oidc_allow.empty()) {
    config.Fail("lifecycle.oidc.allow", "required with OIDC callers (lifecycle.oidc.audience or "
                                        "lifecycle.providers_file): any repository on GitHub can mint a token for "
                                        "any audience; list `owner=team` or `owner/repo=team` entries");
  }
  if (s.tokens_file.empty() && s.oidc.audience.empty() && s.oidc.providers_file.empty()) {
    config.Fail("lifecycle.tokens_file", "required (or lifecycle.oidc.audience / lifecycle.providers_file): "
                                         "the API refuses every call without credentials");
  }
  s.tls.cert_file = config.String("lifecycle.tls.cert_file", "");
  s.tls.key_file = config.String("lifecycle.tls.key_file", "");
  s.tls.client_ca_file = config.String("lifecycle.tls.client_ca_file", "");
  if (s.tls.cert_file.empty() != s.tls.key_file.empty()) {
    config.Fail("lifecycle.tls.cert_file", "set both lifecycle.tls.cert_file and lifecycle.tls.key_file, or neither");
  }
  if (!s.tls.client_ca_file.empty() && s.tls.cert_file.empty()) {
    config.Fail("lifecycle.tls.client_ca_file", "client certificates need TLS (lifecycle.tls.cert_file)");
  }
  s.pools_file = config.String("lifecycle.pools_file", "");
  s.state_dir = config.String("lifecycle.state_dir", "");
  if (s.state_dir.empty()) config.Fail("lifecycle.state_dir", "required: where node logs, work dirs and the lock live");
  s.owner = config.String("lifecycle.owner", s.owner);
  s.runtime_dir = config.String("lifecycle.runtime_dir", "");
  s.local_team = config.String("lifecycle.local.team", "");
  s.local_run_as = config.String("lifecycle.local.run_as", "");
  s.ray_temp_root = config.String("lifecycle.local.ray_temp_root", "");
  // <root>/<uid: up to 10>/<cluster: 17>/session_<date_pid: 40>/sockets/plasma_store
  // must fit in AF_UNIX's 107 bytes: 91 are taken below the root.
  if (!s.ray_temp_root.empty() && (s.ray_temp_root[0] != '/' || s.ray_temp_root.size() > 16)) {
    config.Fail("lifecycle.local.ray_temp_root", "an absolute path of at most 16 bytes (Ray's socket paths under it "
                                                 "must fit in 107)");
  }
  std::string range = config.String("lifecycle.local.uid_range", "");
  if (!range.empty()) {
    std::vector<std::string> ends = absl::StrSplit(range, '-');
    if (ends.size() != 2 || !absl::SimpleAtoi(ends[0], &s.uid_first) || !absl::SimpleAtoi(ends[1], &s.uid_last) ||
        s.uid_first < 1000 || s.uid_last < s.uid_first || s.uid_last > 2'000'000'000) {
      config.Fail("lifecycle.local.uid_range", "'" + range + "' is not FIRST-LAST with 1000 <= FIRST <= LAST");
    }
    if (!s.local_team.empty()) {
      config.Fail("lifecycle.local.team", "set lifecycle.local.team (one team) or lifecycle.local.uid_range "
                                          "(teams isolated by uid), not both");
    }
    if (!s.local_run_as.empty()) {
      config.Fail("lifecycle.local.run_as", "goes with lifecycle.local.team; with lifecycle.local.uid_range each "
                                            "team runs as its own uid");
    }
  } else if (s.provider == "local" && s.local_team.empty()) {
    config.Fail("lifecycle.local.team", "required with the local provider (the one team whose clusters it runs), "
                                        "unless lifecycle.local.uid_range isolates teams by uid (as root)");
  }
  s.ray_bin = config.String("lifecycle.ray_bin", "");
  if (s.owner.empty() || s.owner.size() > 64) config.Fail("lifecycle.owner", "1 to 64 characters");
  s.leader_topic = config.String("lifecycle.topics.leader", s.leader_topic);
  s.webhooks_topic = config.String("lifecycle.topics.webhooks", s.webhooks_topic);
  auto& c = s.controller;
  c.clusters_topic = config.String("lifecycle.topics.clusters", c.clusters_topic);
  c.events_topic = config.String("lifecycle.topics.events", c.events_topic);
  c.reconcile_interval = config.Duration("lifecycle.reconcile_interval", 1s, 10ms, 1min);
  c.stop_grace = config.Duration("lifecycle.stop_grace", 10s, 0ms, 10min);
  c.provision_timeout = config.Duration("lifecycle.provision_timeout", 5min, 1s, 24h);
  c.usage_interval = config.Duration("lifecycle.usage_interval", 60s, 1s, 24h);
  c.sweep_interval = config.Duration("lifecycle.sweep_interval", 30s, 100ms, 1h);
  c.max_lifetime = std::chrono::duration_cast<std::chrono::seconds>(
      config.Duration("lifecycle.max_lifetime", 7 * 24h, 1s, 365 * 24h));
  c.max_nodes_per_group = static_cast<int>(config.Int("lifecycle.max_nodes_per_group", 64, 1, 10'000));
  c.max_clusters_per_team = static_cast<int>(config.Int("lifecycle.max_clusters_per_team", 500, 1, 100'000));
  c.write_timeout = std::max<std::chrono::milliseconds>(s.kafka.delivery_timeout * 2, 1s);
  return s;
}

service::Definition Definition() {
  return service::Define(
      "relay-lifecycle", [](Config& config, const service::CommonSettings&) { return LoadSettings(config); },
      [](LifecycleSettings settings, service::Runtime& runtime) {
        return service::Wired(std::make_unique<LifecycleService>(std::move(settings)), runtime);
      });
}

}  // namespace relay::lifecycle
