// GitHub webhook signatures: X-Hub-Signature-256 = "sha256=" followed by the
// lower-case hex HMAC-SHA256 of the raw request body keyed by the webhook
// secret. Thread-safe; immutable after construction.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

// OpenSSL's EVP_MAC_CTX, declared here so this header needs no OpenSSL include.
struct evp_mac_ctx_st;

namespace relay::github {

class WebhookVerifier {
 public:
  // Every secret in `secrets` is accepted, so a secret can be rotated without
  // downtime (add the new one, switch GitHub, remove the old one).
  explicit WebhookVerifier(std::vector<std::string> secrets);
  ~WebhookVerifier();
  WebhookVerifier(const WebhookVerifier&) = delete;
  WebhookVerifier& operator=(const WebhookVerifier&) = delete;

  // True when `header` is a well-formed sha256 signature of `body` under any
  // active secret. The MAC comparison is constant-time (CRYPTO_memcmp) and
  // runs for every secret, so timing reveals neither bytes nor which secret.
  bool Verify(std::string_view header, std::string_view body) const;

  size_t secret_count() const { return secrets_.size(); }

 private:
  std::vector<std::string> secrets_;
  // One keyed HMAC-SHA256 context per secret, set up once; Verify works on a
  // copy of it, which skips the per-call algorithm fetch and key schedule.
  std::vector<evp_mac_ctx_st*> keyed_;
};

// "sha256=<hex>" for `body` under `secret`, as GitHub computes it.
std::string SignWebhook(std::string_view secret, std::string_view body);

// The JSON document of a webhook body: the body itself (application/json or
// no content type), or the url-decoded `payload` field of a form post
// (application/x-www-form-urlencoded), GitHub's two content types. `json`
// points into `body` or into `*decoded`. False for anything else.
bool WebhookJson(std::string_view content_type, const std::string& body, std::string* decoded,
                 std::string_view* json);

}  // namespace relay::github
