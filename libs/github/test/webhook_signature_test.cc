#include "relay/github/webhook_signature.h"

#include <gtest/gtest.h>

namespace relay::github {
namespace {

// The example from GitHub's "Validating webhook deliveries" documentation.
constexpr char kDocSecret[] = "It's a Secret to Everybody";
constexpr char kDocPayload[] = "Hello, World!";
constexpr char kDocSignature[] = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";

TEST(WebhookSignatureTest, MatchesGitHubDocumentationVector) {
  EXPECT_EQ(SignWebhook(kDocSecret, kDocPayload), kDocSignature);
  EXPECT_TRUE(WebhookVerifier({kDocSecret}).Verify(kDocSignature, kDocPayload));
}

TEST(WebhookSignatureTest, AcceptsAnyActiveSecretForRotation) {
  WebhookVerifier verifier({"old-secret", kDocSecret});
  EXPECT_TRUE(verifier.Verify(kDocSignature, kDocPayload));
  EXPECT_TRUE(verifier.Verify(SignWebhook("old-secret", kDocPayload), kDocPayload));
  EXPECT_FALSE(verifier.Verify(SignWebhook("retired-secret", kDocPayload), kDocPayload));
}

TEST(WebhookSignatureTest, UpperCaseHexIsAccepted) {
  std::string upper = "sha256=757107EA0EB2509FC211221CCE984B8A37570B6D7586C22C46F4379C8B043E17";
  EXPECT_TRUE(WebhookVerifier({kDocSecret}).Verify(upper, kDocPayload));
}

TEST(WebhookSignatureTest, RejectsMalformedAndWrongSignatures) {
  WebhookVerifier verifier({kDocSecret});
  std::string sig = kDocSignature;
  EXPECT_FALSE(verifier.Verify("", kDocPayload));
  EXPECT_FALSE(verifier.Verify("sha1=757107ea0eb2509fc211221cce984b8a", kDocPayload));
  EXPECT_FALSE(verifier.Verify(sig.substr(0, sig.size() - 1), kDocPayload));
  EXPECT_FALSE(verifier.Verify(sig + "0", kDocPayload));
  std::string bad_hex = sig;
  bad_hex[10] = 'g';
  EXPECT_FALSE(verifier.Verify(bad_hex, kDocPayload));
  std::string flipped = sig;
  flipped.back() = flipped.back() == '7' ? '8' : '7';
  EXPECT_FALSE(verifier.Verify(flipped, kDocPayload));
  EXPECT_FALSE(verifier.Verify(sig, "Hello, World?"));
}

TEST(WebhookSignatureTest, NoSecretsVerifiesNothing) {
  EXPECT_FALSE(WebhookVerifier({}).Verify(kDocSignature, kDocPayload));
}

}  // namespace
}  // namespace relay::github
