// How this process's Kafka clients authenticate to the brokers and encrypt
// their connections: librdkafka's security.protocol, sasl.* and ssl.*
// properties (the Kafka a user already runs rarely takes anonymous
// plaintext; deploy/kafka/acls.md gives each service its own principal).
//
// One setting per process, not a field of every client's options: a relay
// process talks to one Kafka cluster as one principal, and its clients are
// made in some twenty places from a bootstrap address alone (consumers,
// readers, followers, admin handles, the lifecycle elector, relayctl).
// Threading it through each would let one place forget it; instead the
// service host (kafka.security_protocol and the keys below) or relayctl
// (RELAY_KAFKA_* variables) sets it once at start, before any client
// exists, and every client in libs/kafka applies it after its own defaults
// and before its `extra` properties.
#pragma once

#include <librdkafka/rdkafka.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "relay/base/config.h"

namespace relay::kafka {

struct Security {
  std::string protocol = "plaintext";  // plaintext | ssl | sasl_plaintext | sasl_ssl
  std::string sasl_mechanism;          // PLAIN | SCRAM-SHA-256 | SCRAM-SHA-512 (sasl_* only)
  std::string sasl_username;
  std::string sasl_password;           // read from a file by the caller; never logged
  std::string ssl_ca_file;             // empty: the system's CA store
  std::string ssl_certificate_file;    // client certificate (mutual TLS), with ssl_key_file
  std::string ssl_key_file;

  // InvalidArgument naming the first problem: an unknown protocol or
  // mechanism, SASL without a mechanism, user or password, a certificate
  // without its key, or TLS/SASL settings the protocol would ignore.
  absl::Status Validate() const;
  // The librdkafka properties, in order; none for plaintext.
  std::vector<std::pair<std::string, std::string>> Properties() const;
};

// Reads kafka.security_protocol (default plaintext), kafka.sasl_mechanism,
// kafka.sasl_username, kafka.sasl_password_file (the password is the
// file's content, trailing whitespace stripped), kafka.ssl_ca_file,
// kafka.ssl_certificate_file and kafka.ssl_key_file; problems (Validate's,
// an unreadable password file) are recorded in `config`.
Security ReadSecurity(Config& config);

// Sets the process's Kafka security (after Validate). Call before making
// clients; clients made before keep what they had.
void SetSecurity(Security security);
// The properties of the process's security (none until SetSecurity).
std::vector<std::pair<std::string, std::string>> SecurityProperties();
// Sets SecurityProperties() on `conf`; InvalidArgument naming the property
// librdkafka refused (e.g. SASL in a build without it). The password never
// appears in the message.
absl::Status ApplySecurity(rd_kafka_conf_t* conf);

}  // namespace relay::kafka
