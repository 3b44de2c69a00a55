// Test fixtures shared by the integration tests: the signed webhook corpus
// the ctest `corpus` fixture builds, and throwaway RSA key pairs.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace relay::testing {

struct CorpusPayload {
  std::string event;      // X-GitHub-Event
  std::string body;       // the @octokit/webhooks-examples payload, as GitHub sends it
  std::string signature;  // X-Hub-Signature-256, computed by @octokit/webhooks-methods
};

// Every payload of $RELAY_IT_CORPUS/manifest.tsv, in corpus order.
std::vector<CorpusPayload> LoadCorpus();

// A fresh RSA-2048 key pair as PEM: (private, public).
std::pair<std::string, std::string> NewRsaKeyPairPem();

}  // namespace relay::testing
