#include "relay/kafka/security.h"

#include <mutex>

#include "absl/strings/ascii.h"
#include "relay/base/secret_file.h"

namespace relay::kafka {
namespace {

std::mutex& Mu() {
  static std::mutex mu;
  return mu;
}

Security& Current() {
  static Security s;
  return s;
}

bool IsSasl(const std::string& p) { return p == "sasl_plaintext" || p == "sasl_ssl"; }
bool IsTls(const std::string& p) { return p == "ssl" || p == "sasl_ssl"; }

}  // namespace

absl::Status Security::Validate() const {
  if (protocol != "plaintext" && protocol != "ssl" && !IsSasl(protocol)) {
    return absl::InvalidArgumentError("'" + protocol + "' is not plaintext|ssl|sasl_plaintext|sasl_ssl");
  }
  if (IsSasl(protocol)) {
    if (sasl_mechanism != "PLAIN" && sasl_mechanism != "SCRAM-SHA-256" && sasl_mechanism != "SCRAM-SHA-512") {
      return absl::InvalidArgumentError("SASL mechanism '" + sasl_mechanism +
                                        "' is not PLAIN|SCRAM-SHA-256|SCRAM-SHA-512");
    }
    if (sasl_username.empty()) return absl::InvalidArgumentError(protocol + " needs a SASL user name");
    if (sasl_password.empty()) return absl::InvalidArgumentError(protocol + " needs a SASL password");
  } else if (!sasl_mechanism.empty() || !sasl_username.empty() || !sasl_password.empty()) {
    return absl::InvalidArgumentError("SASL settings given, but the protocol is " + protocol +
                                      ": they would be ignored");
  }
  if (!IsTls(protocol) && (!ssl_ca_file.empty() || !ssl_certificate_file.empty() || !ssl_key_file.empty())) {
    return absl::InvalidArgumentError("TLS files given, but the protocol is " + protocol + ": they would be ignored");
  }
  if (ssl_certificate_file.empty() != ssl_key_file.empty()) {
    return absl::InvalidArgumentError("a client certificate needs its key, and a key its certificate");
  }
  return absl::OkStatus();
}

std::vector<std::pair<std::string, std::string>> Security::Properties() const {
  std::vector<std::pair<std::string, std::string>> p;
  if (protocol == "plaintext") return p;
  p.emplace_back("security.protocol", protocol);
  if (IsSasl(protocol)) {
    p.emplace_back("sasl.mechanisms", sasl_mechanism);
    p.emplace_back("sasl.username", sasl_username);
    p.emplace_back("sasl.password", sasl_password);
  }
  if (!ssl_ca_file.empty()) p.emplace_back("ssl.ca.location", ssl_ca_file);
  if (!ssl_certificate_file.empty()) {
    p.emplace_back("ssl.certificate.location", ssl_certificate_file);
    p.emplace_back("ssl.key.location", ssl_key_file);
  }
  return p;
}

Security ReadSecurity(Config& config) {
  Security s;
  // As librdkafka: any case (SASL_SSL, sasl_ssl; scram-sha-512).
  s.protocol = absl::AsciiStrToLower(config.String("kafka.security_protocol", "plaintext"));
  s.sasl_mechanism = absl::AsciiStrToUpper(config.String("kafka.sasl_mechanism", ""));
  s.sasl_username = config.String("kafka.sasl_username", "");
  s.sasl_password = ReadSecretFile(config, "kafka.sasl_password_file");
  s.ssl_ca_file = config.String("kafka.ssl_ca_file", "");
  s.ssl_certificate_file = config.String("kafka.ssl_certificate_file", "");
  s.ssl_key_file = config.String("kafka.ssl_key_file", "");
  if (absl::Status v = s.Validate(); !v.ok()) config.Fail("kafka.security_protocol", std::string(v.message()));
  return s;
}

void SetSecurity(Security security) {
  std::lock_guard lock(Mu());
  Current() = std::move(security);
}

std::vector<std::pair<std::string, std::string>> SecurityProperties() {
  std::lock_guard lock(Mu());
  return Current().Properties();
}

absl::Status ApplySecurity(rd_kafka_conf_t* conf) {
  char err[512];
  for (const auto& [k, v] : SecurityProperties()) {
    if (rd_kafka_conf_set(conf, k.c_str(), v.c_str(), err, sizeof err) != RD_KAFKA_CONF_OK) {
      return absl::InvalidArgumentError("kafka property " + k + ": " + err);
    }
  }
  return absl::OkStatus();
}

}  // namespace relay::kafka
