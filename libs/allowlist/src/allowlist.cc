#include "relay/allowlist/allowlist.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "relay/base/log.h"

namespace relay::allowlist {

std::string_view LevelName(Level level) {
  switch (level) {
    case Level::kL1: return "L1";
    case Level::kL2: return "L2";
    case Level::kL3: return "L3";
    case Level::kL4: return "L4";
  }
  return "L?";
}

bool IsValidRepoName(std::string_view repo) {
  auto slash = repo.find('/');
  if (slash == std::string_view::npos || slash == 0 || slash > 39 || repo.size() - slash - 1 == 0 ||
      repo.size() - slash - 1 > 100) {
    return false;
  }
  std::string_view name = repo.substr(slash + 1);
  // "." and ".." would be path segments of their own in an API URL.
  if (name == "." || name == "..") return false;
  for (size_t i = 0; i < repo.size(); ++i) {
    char c = repo[i];
    if (i == slash) continue;
    bool ok = absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' || (i > slash && (c == '.' || c == '_'));
    if (!ok) return false;
  }
  return true;
}

const Subscription& Subscription::Default() {
  static const Subscription kDefault{
      {"push", "pull_request.opened", "pull_request.reopened", "pull_request.synchronize", "pull_request.closed"}, {}};
  return kDefault;
}

bool Subscription::WantsEvent(std::string_view event, std::string_view action) const {
  std::string key(event);
  if (!action.empty()) key += "." + std::string(action);
  return events.count(key) > 0;
}

bool Subscription::MatchesLabel(std::string_view label) const {
  for (const std::string& want : labels) {
    if (!want.empty() && want.back() == '*') {
      if (label.substr(0, want.size() - 1) == std::string_view(want).substr(0, want.size() - 1)) return true;
    } else if (label == want) {
      return true;
    }
  }
  return false;
}

namespace {

// One repository's subscription: {events: [...], labels: [...]}; the
// events expanded ("pull_request" is its four default actions).
absl::StatusOr<Subscription> ParseSubscription(const YAML::Node& node, const std::string& repo) {
  auto bad = [&](const std::string& why) { return absl::InvalidArgumentError("subscription of " + repo + ": " + why); };
  if (!node.IsMap()) return bad("expected a mapping with events and labels");
  Subscription sub;
  bool has_events = false;
  for (const auto& kv : node) {
    std::string key = kv.first.as<std::string>();
    const YAML::Node& value = kv.second;
    if (!value.IsNull() && !value.IsSequence()) return bad(key + " must be a list");
    if (key == "events") {
      has_events = true;
      for (const auto& e : value) {
        std::string event = e.as<std::string>();
        if (event == "push") {
          sub.events.insert(event);
        } else if (event == "pull_request") {
          for (const auto& d : Subscription::Default().events) {
            if (d.rfind("pull_request.", 0) == 0) sub.events.insert(d);
          }
        } else if (event.rfind("pull_request.", 0) == 0 &&
                   std::find(std::begin(kPullRequestActions), std::end(kPullRequestActions),
                             std::string_view(event).substr(13)) != std::end(kPullRequestActions)) {
          sub.events.insert(event);
        } else {
          return bad("unknown event '" + event +
                     "' (push, pull_request, pull_request.<opened|reopened|synchronize|closed|labeled>)");
        }
      }
    } else if (key == "labels") {
      for (const auto& l : value) {
        std::string label = l.as<std::string>();
        if (label.empty() || label == "*") return bad("a label must be a name or a prefix followed by *");
        sub.labels.push_back(std::move(label));
      }
    } else {
      return bad("unknown key '" + key + "' (events, labels)");
    }
  }
  if (!has_events) sub.events = Subscription::Default().events;  // labels alone narrow today's events
  return sub;
}

std::vector<std::string> Oncalls(const YAML::Node& node) {
  std::vector<std::string> out;
  if (node.IsSequence()) {
    for (const auto& n : node) out.push_back(n.as<std::string>());
  } else if (node.IsScalar()) {
    for (auto part : absl::StrSplit(node.as<std::string>(), ',', absl::SkipWhitespace())) {
      out.emplace_back(absl::StripAsciiWhitespace(absl::string_view(part.data(), part.size())));
    }
  }
  return out;
}

class Builder {
 public:
  explicit Builder(std::string_view origin) : origin_(origin) {}

  // An item of a level's list: "org/repo" or {org/repo: oncalls}.
  absl::Status Item(const YAML::Node& item, Level level, const std::string& device) {
    if (item.IsScalar()) return Add(item.as<std::string>(), level, device, {});
    if (item.IsMap() && item.size() == 1) {
      auto kv = *item.begin();
      return Add(kv.first.as<std::string>(), level, device, Oncalls(kv.second));
    }
    return Error(std::string(LevelName(level)) + ": each item must be \"org/repo\" or {org/repo: oncalls}");
  }

  // A level's value: a list of items or a map repo -> oncalls.
  absl::Status Repos(const YAML::Node& node, Level level, const std::string& device) {
    if (node.IsNull()) return absl::OkStatus();
    if (node.IsSequence()) {
      for (const auto& item : node) {
        if (absl::Status s = Item(item, level, device); !s.ok()) return s;
      }
      return absl::OkStatus();
    }
    if (node.IsMap()) {
      for (const auto& kv : node) {
        if (absl::Status s = Add(kv.first.as<std::string>(), level, device, Oncalls(kv.second)); !s.ok()) return s;
      }
      return absl::OkStatus();
    }
    return Error(std::string(LevelName(level)) + ": expected a list or a mapping of repositories");
  }

  absl::Status Add(std::string repo, Level level, const std::string& device, std::vector<std::string> oncalls) {
    repo = std::string(absl::StripAsciiWhitespace(repo));
    if (!IsValidRepoName(repo)) return Error("'" + repo + "' is not an owner/name repository");
    std::string key = absl::AsciiStrToLower(repo);
    if (auto it = seen_.find(key); it != seen_.end()) {
      return Error(repo + " is listed twice (" + it->second + " and " + std::string(LevelName(level)) +
                   "); a repository belongs to one level only");
    }
    seen_[key] = std::string(LevelName(level)) + (device.empty() ? "" : "/" + device);
    list_.push_back(Entry{std::move(repo), level, device, std::move(oncalls)});
    return absl::OkStatus();
  }

  absl::Status Error(const std::string& what) const {
    return absl::InvalidArgumentError("allowlist " + std::string(origin_) + ": " + what);
  }

  std::vector<Entry> Take() { return std::move(list_); }

 private:
  std::string_view origin_;
  std::map<std::string, std::string> seen_;
  std::vector<Entry> list_;
};

}  // namespace

absl::StatusOr<Allowlist> Allowlist::Parse(std::string_view yaml, std::string_view origin) {
  Builder b(origin);
  YAML::Node subscriptions;
  try {
    YAML::Node root = YAML::Load(std::string(yaml));
    if (root.IsNull()) return b.Error("empty");
    if (!root.IsMap()) return b.Error("top level must be a mapping of L1..L4");
    for (const auto& kv : root) {
      std::string name = kv.first.as<std::string>();
      if (name == "L1" || name == "L2" || name == "L4") {
        Level level = name == "L1" ? Level::kL1 : name == "L2" ? Level::kL2 : Level::kL4;
        if (absl::Status s = b.Repos(kv.second, level, ""); !s.ok()) return s;
      } else if (name == "L3") {
        if (kv.second.IsNull()) continue;
        if (!kv.second.IsMap()) return b.Error("L3 must map each device to its repositories");
        for (const auto& device : kv.second) {
          std::string d = device.first.as<std::string>();
          if (d.empty() || d.find('/') != std::string::npos) return b.Error("L3 device '" + d + "' is not a label suffix");
          if (absl::Status s = b.Repos(device.second, Level::kL3, d); !s.ok()) return s;
        }
      } else if (name == "subscriptions") {
        subscriptions = kv.second;  // applied once every level is read
      } else {
        return b.Error("unknown level '" + name + "' (L1, L2, L3, L4, or subscriptions)");
      }
    }
  } catch (const YAML::Exception& e) {
    return b.Error(e.what());
  }
  Allowlist list;
  list.entries_ = b.Take();
  std::stable_sort(list.entries_.begin(), list.entries_.end(), [](const Entry& a, const Entry& c) {
    if (a.level != c.level) return a.level > c.level;
    return absl::AsciiStrToLower(a.repo) < absl::AsciiStrToLower(c.repo);
  });
  for (size_t i = 0; i < list.entries_.size(); ++i) list.by_lower_name_[absl::AsciiStrToLower(list.entries_[i].repo)] = i;
  try {
    if (!subscriptions.IsNull() && !subscriptions.IsMap()) return b.Error("subscriptions must map repositories to theirs");
    for (const auto& kv : subscriptions) {
      std::string repo = kv.first.as<std::string>();
      auto it = list.by_lower_name_.find(absl::AsciiStrToLower(repo));
      if (it == list.by_lower_name_.end()) return b.Error("subscription of " + repo + ", which is in no level");
      Entry& entry = list.entries_[it->second];
      if (entry.subscribed) return b.Error(repo + " has two subscriptions");
      auto sub = ParseSubscription(kv.second, repo);
      if (!sub.ok()) return b.Error(std::string(sub.status().message()));
      entry.subscription = std::move(*sub);
      entry.subscribed = true;
    }
  } catch (const YAML::Exception& e) {
    return b.Error(e.what());
  }
  return list;
}

absl::StatusOr<Allowlist> Allowlist::Load(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::InvalidArgumentError("allowlist " + path + ": cannot read the file");
  std::stringstream text;
  text << in.rdbuf();
  return Parse(text.str(), path);
}

const Entry* Allowlist::Find(std::string_view repo) const {
  auto it = by_lower_name_.find(absl::AsciiStrToLower(absl::string_view(repo.data(), repo.size())));
  return it == by_lower_name_.end() ? nullptr : &entries_[it->second];
}

size_t Allowlist::Count(Level level) const {
  return static_cast<size_t>(
      std::count_if(entries_.begin(), entries_.end(), [level](const Entry& e) { return e.level == level; }));
}

AllowlistFile::AllowlistFile(std::string path, prometheus::Registry* metrics)
    : path_(std::move(path)),
      reloads_(prometheus::BuildCounter()
                   .Name("relay_allowlist_reloads_total")
                   .Help("Allowlist file loads by result (loaded, refused)")
                   .Register(*metrics)),
      repos_(prometheus::BuildGauge()
                 .Name("relay_allowlist_repos")
                 .Help("Repositories in the allowlist in force, by level")
                 .Register(*metrics)) {}

absl::StatusOr<std::unique_ptr<AllowlistFile>> AllowlistFile::Open(std::string path, prometheus::Registry* metrics) {
  std::unique_ptr<AllowlistFile> file(new AllowlistFile(std::move(path), metrics));
  std::ifstream in(file->path_);
  if (!in) return absl::InvalidArgumentError("allowlist " + file->path_ + ": cannot read the file");
  std::stringstream text;
  text << in.rdbuf();
  auto list = Allowlist::Parse(text.str(), file->path_);
  if (!list.ok()) return list.status();
  file->content_ = text.str();
  file->Publish(std::make_shared<const Allowlist>(std::move(*list)));
  file->reloads_.Add({{"result", "loaded"}}).Increment();
  file->reloads_.Add({{"result", "refused"}});
  return file;
}

std::shared_ptr<const Allowlist> AllowlistFile::Current() const {
  std::lock_guard lock(mu_);
  return current_;
}

void AllowlistFile::Publish(std::shared_ptr<const Allowlist> list) {
  for (Level l : {Level::kL1, Level::kL2, Level::kL3, Level::kL4}) {
    repos_.Add({{"level", std::string(LevelName(l))}}).Set(static_cast<double>(list->Count(l)));
  }
  std::lock_guard lock(mu_);
  current_ = std::move(list);
}

absl::Status AllowlistFile::Refresh() {
  std::ifstream in(path_);
  std::stringstream text;
  if (in) text << in.rdbuf();
  {
    std::lock_guard lock(mu_);
    if (in && text.str() == content_) return absl::OkStatus();  // unchanged (or the same bad file again)
  }
  absl::StatusOr<Allowlist> list =
      in ? Allowlist::Parse(text.str(), path_) : absl::InvalidArgumentError("allowlist " + path_ + ": cannot read the file");
  {
    std::lock_guard lock(mu_);
    content_ = text.str();
  }
  if (!list.ok()) {
    reloads_.Add({{"result", "refused"}}).Increment();
    log::Error("allowlist change refused; the previous one stays in force",
               {{"file", path_}, {"error", std::string(list.status().message())}});
    return list.status();
  }
  Publish(std::make_shared<const Allowlist>(std::move(*list)));
  reloads_.Add({{"result", "loaded"}}).Increment();
  log::Info("allowlist reloaded", {{"file", path_}, {"repos", static_cast<int64_t>(Current()->entries().size())}});
  return absl::OkStatus();
}

}  // namespace relay::allowlist
