// The gRPC surface in-process: bearer tokens on every call, and mTLS when
// lifecycle.tls.* is set (certificates made here with the openssl CLI): a
// client without a certificate the CA signed cannot even connect, one with
// it still needs its token. The same through LifecycleClient, the API's
// client.
#include "relay/lifecycle/grpc_api.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "relay/kafka/testing/fake_broker.h"
#include "relay/kafka/testing/fake_consumer.h"
#include "relay/kafka/testing/fake_producer.h"
#include "relay/lifecycle/client.h"
#include "relay/v1/lifecycle.grpc.pb.h"

namespace relay::lifecycle {
namespace {

using namespace std::chrono_literals;

std::string Read(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Nodes are never started here: a provider that only says no.
class NoProvider final : public NodeProvider {
 public:
  std::string name() const override { return "none"; }
  absl::Status Acquire() override { return absl::OkStatus(); }
  void Release() override {}
  absl::Status Supports(const v1::ClusterSpec&) const override { return absl::OkStatus(); }
  absl::Status PrepareCluster(v1::Cluster&) override { return absl::OkStatus(); }
  absl::Status StartNode(const v1::Cluster&, v1::Node&) override { return absl::UnavailableError("no"); }
  NodeStatus CheckNode(const v1::Cluster&, const v1::Node&) override { return {}; }
  absl::Status StopNode(const v1::Cluster&, const v1::Node&, bool) override { return absl::OkStatus(); }
  absl::Status CleanupCluster(const v1::Cluster&) override { return absl::OkStatus(); }
  absl::Status SubmitJob(const v1::Cluster&, v1::Job&) override { return absl::UnavailableError("no"); }
  JobStatus CheckJob(const v1::Cluster&, const v1::Job&) override { return {"RUNNING", -1, ""}; }
  absl::Status StopJob(const v1::Cluster&, const v1::Job&, bool) override { return absl::OkStatus(); }
  absl::StatusOr<std::vector<Owned>> Inventory() override { return std::vector<Owned>{}; }
  absl::Status Remove(const Owned&) override { return absl::OkStatus(); }
};

class GrpcApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("grpc-api-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    broker_.CreateTopic("lifecycle.clusters", 1);
    broker_.CreateTopic("cluster.events", 1);
    ControllerOptions co;
    co.background = false;
    controller_ = std::make_unique<Controller>(co, &provider_, &reader_, &clock_, &registry_);
    ASSERT_TRUE(controller_->TakeOver(1, &producer_).ok());
    auto tokens = auth::ParseServiceTokens("tokens:\n  - {name: ml-ci, team: ml, sha256: " +
                                               auth::ServiceTokenDigest("ml-token") + "}\n",
                                           "test");
    ASSERT_TRUE(tokens.ok());
    callers_ = std::move(*auth::CallerAuthenticator::New(*tokens, nullptr));
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A CA, a server certificate for 127.0.0.1 and localhost, and a client
  // certificate, all signed by the CA; plus a client signed by another CA.
  void MakeCertificates() {
    std::string d = dir_.string();
    std::string script =
        "set -e; cd " + d + "\n"
        "openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=relay-test-ca 2>/dev/null\n"
        "openssl req -x509 -newkey rsa:2048 -nodes -keyout other.key -out other.pem -days 2 -subj /CN=other-ca 2>/dev/null\n"
        "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > san.ext\n"
        "openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=localhost 2>/dev/null\n"
        "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 2 -extfile san.ext 2>/dev/null\n"
        "for who in client:ca stranger:other; do n=${who%%:*}; c=${who##*:}\n"
        "  openssl req -newkey rsa:2048 -nodes -keyout $n.key -out $n.csr -subj /CN=$n 2>/dev/null\n"
        "  openssl x509 -req -in $n.csr -CA $c.pem -CAkey $c.key -CAcreateserial -out $n.pem -days 2 2>/dev/null\n"
        "done\n";
    ASSERT_EQ(std::system(("bash -c '" + Escape(script) + "'").c_str()), 0);
  }
  static std::string Escape(const std::string& s) {
    std::string out;
    for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out;
  }

  grpc::Status Get(const std::shared_ptr<grpc::Channel>& ch, const std::string& token) {
    auto stub = v1::LifecycleApi::NewStub(ch);
    grpc::ClientContext ctx;
    if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
    ctx.set_deadline(std::chrono::system_clock::now() + 5s);
    v1::ListClustersRequest req;
    v1::ListClustersResponse out;
    return stub->ListClusters(&ctx, req, &out);
  }

  // ListClusters through the client, with a deadline of 5 s.
  static grpc::Status List(LifecycleClient client) {
    v1::ListClustersRequest req;
    v1::ListClustersResponse out;
    return client.api().ListClusters(client.Context(5s).get(), req, &out);
  }

  std::filesystem::path dir_;
  kafka::testing::FakeBroker broker_;
  kafka::testing::FakeProducer producer_{kafka::testing::FakeProducer::Mode::kAuto, &broker_};
  kafka::testing::FakeTopicReader reader_{&broker_};
  FakeClock clock_;
  prometheus::Registry registry_;
  NoProvider provider_;
  std::unique_ptr<Controller> controller_;
  std::unique_ptr<auth::CallerAuthenticator> callers_;
};

TEST_F(GrpcApiTest, PlaintextNeedsTheToken) {
  auto api = GrpcApi::Start("127.0.0.1:0", {}, controller_.get(), callers_.get(), &registry_);
  ASSERT_TRUE(api.ok()) << api.status();
  auto ch = grpc::CreateChannel("127.0.0.1:" + std::to_string((*api)->port()), grpc::InsecureChannelCredentials());
  EXPECT_EQ(Get(ch, "").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Get(ch, "wrong").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(Get(ch, "ml-token").ok());
}

TEST_F(GrpcApiTest, MutualTlsRefusesClientsWithoutACertificateOfTheCa) {
  MakeCertificates();
  TlsOptions tls{(dir_ / "server.pem").string(), (dir_ / "server.key").string(), (dir_ / "ca.pem").string()};
  auto api = GrpcApi::Start("127.0.0.1:0", tls, controller_.get(), callers_.get(), &registry_);
  ASSERT_TRUE(api.ok()) << api.status();
  // An ipv4: target needs no name resolution: gRPC's c-ares resolver leaks
  // a few bytes per lookup when a TLS handshake fails (seen under LSan), and
  // the server certificate names 127.0.0.1 anyway.
  std::string addr = "ipv4:127.0.0.1:" + std::to_string((*api)->port());
  auto with = [&](const std::string& who) {
    grpc::SslCredentialsOptions o;
    o.pem_root_certs = Read(dir_ / "ca.pem");
    if (!who.empty()) {
      o.pem_cert_chain = Read(dir_ / (who + ".pem"));
      o.pem_private_key = Read(dir_ / (who + ".key"));
    }
    return grpc::CreateChannel(addr, grpc::SslCredentials(o));
  };
  EXPECT_TRUE(Get(with("client"), "ml-token").ok());
  EXPECT_EQ(Get(with("client"), "").error_code(), grpc::StatusCode::UNAUTHENTICATED) << "the certificate is not a token";
  EXPECT_EQ(Get(with(""), "ml-token").error_code(), grpc::StatusCode::UNAVAILABLE) << "no client certificate";
  EXPECT_EQ(Get(with("stranger"), "ml-token").error_code(), grpc::StatusCode::UNAVAILABLE) << "another CA's";
  EXPECT_EQ(Get(grpc::CreateChannel(addr, grpc::InsecureChannelCredentials()), "ml-token").error_code(),
            grpc::StatusCode::UNAVAILABLE)
      << "plaintext";
}

// LifecycleClient (relay/lifecycle/client.h), what `relayctl clusters`
// calls through: each call carries its token.
TEST_F(GrpcApiTest, TheClientsCallsCarryItsToken) {
  auto api = GrpcApi::Start("127.0.0.1:0", {}, controller_.get(), callers_.get(), &registry_);
  ASSERT_TRUE(api.ok()) << api.status();
  ClientOptions o;
  o.address = "127.0.0.1:" + std::to_string((*api)->port());
  o.token = "ml-token";
  EXPECT_TRUE(List(LifecycleClient(o)).ok());
  o.token = "";
  EXPECT_EQ(List(LifecycleClient(o)).error_code(), grpc::StatusCode::UNAUTHENTICATED);
}

// With tls, the client verifies the server against its CA and presents its
// own certificate (mTLS); without either it cannot connect.
TEST_F(GrpcApiTest, TheClientSpeaksMutualTls) {
  MakeCertificates();
  TlsOptions tls{(dir_ / "server.pem").string(), (dir_ / "server.key").string(), (dir_ / "ca.pem").string()};
  auto api = GrpcApi::Start("127.0.0.1:0", tls, controller_.get(), callers_.get(), &registry_);
  ASSERT_TRUE(api.ok()) << api.status();
  ClientOptions o;
  o.address = "ipv4:127.0.0.1:" + std::to_string((*api)->port());  // no resolver: see above
  o.token = "ml-token";
  EXPECT_EQ(List(LifecycleClient(o)).error_code(), grpc::StatusCode::UNAVAILABLE) << "plaintext";
  o.tls = true;
  o.ca_pem = Read(dir_ / "ca.pem");
  EXPECT_EQ(List(LifecycleClient(o)).error_code(), grpc::StatusCode::UNAVAILABLE) << "no client certificate";
  o.cert_pem = Read(dir_ / "client.pem");
  o.key_pem = Read(dir_ / "client.key");
  EXPECT_TRUE(List(LifecycleClient(o)).ok());
  o.token = "";
  EXPECT_EQ(List(LifecycleClient(o)).error_code(), grpc::StatusCode::UNAUTHENTICATED) << "the certificate is not a token";
}

}  // namespace
}  // namespace relay::lifecycle
