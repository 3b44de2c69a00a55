#include "relay/github/webhook_key.h"

#include "absl/strings/ascii.h"

namespace relay::github {
namespace {

bool IsPullRequestEvent(std::string_view event) {
  return event == "pull_request" || event == "pull_request_review" || event == "pull_request_review_comment" ||
         event == "pull_request_review_thread" || event == "issues" || event == "issue_comment";
}

}  // namespace

bool ParseWebhookKeys(std::string_view text, WebhookKeys* out) {
  if (text == "repository") {
    *out = WebhookKeys::kRepository;
  } else if (text == "ordered") {
    *out = WebhookKeys::kOrdered;
  } else {
    return false;
  }
  return true;
}

std::string_view KeyObjectOf(std::string_view event) {
  for (std::string_view o : {"workflow_job", "workflow_run", "check_run", "check_suite"}) {
    if (event == o) return o;
  }
  return "";
}

std::string WebhookKey(WebhookKeys scheme, const WebhookKeyFacts& f, std::string_view delivery_id) {
  if (f.repository.empty()) return std::string(delivery_id);
  // As received, not lower-cased: the key (and partition) of every record a
  // running deployment wrote before must not change.
  if (scheme == WebhookKeys::kRepository) return std::string(f.repository);
  std::string repo = absl::AsciiStrToLower(std::string(f.repository));
  if (IsPullRequestEvent(f.event)) return f.number > 0 ? repo + "#" + std::to_string(f.number) : repo;
  if (f.event == "push") return f.ref.empty() ? repo : repo + "@" + std::string(f.ref);
  if (f.event == "status") return f.sha.empty() ? repo : repo + "@" + std::string(f.sha);
  if (f.event == "workflow_job") return f.object_id > 0 ? repo + "/job:" + std::to_string(f.object_id) : repo;
  if (f.event == "workflow_run") return f.object_id > 0 ? repo + "/run:" + std::to_string(f.object_id) : repo;
  if (std::string_view o = KeyObjectOf(f.event); !o.empty() && f.object_id > 0) {
    return repo + "/" + std::string(o) + ":" + std::to_string(f.object_id);  // check_run, check_suite
  }
  return repo;
}

}  // namespace relay::github
