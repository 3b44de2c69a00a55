// File operations the local provider does as root next to what teams own,
// written so that a team can never turn them against another path.
//
// The rule (issue 27, item 1): the service never opens, creates, chowns,
// chmods or removes a path by name inside a directory a team can write. A
// team's work dir and Ray temp dir are the team's; everything the service
// writes (the token file, the logs, the directories themselves) is made
// *in a directory only the service can write*, through a descriptor of that
// directory (openat and friends) and with O_NOFOLLOW, so a symlink a team
// planted is never followed. Removal of a team's tree walks it by
// descriptors and never follows a link either.
//
// std::filesystem is not used here on purpose: its calls take paths, so
// every one is a time-of-check/time-of-use window against a team that
// swaps a directory for a symlink.
//
// Errors are FailedPrecondition (a path that is not what the service made:
// refused, with the reason) or Unavailable (the system call failed).
#pragma once

#include <sys/types.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace relay::lifecycle {

// An owned file descriptor (closed on destruction); -1 when empty.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd();
  int get() const { return fd_; }

 private:
  int fd_ = -1;
};

// Owner of what the service makes: uid/gid, -1 for the service's own.
struct Owner {
  int64_t uid = -1;
  int64_t gid = -1;
};

// `path`, a directory the service owns (made with `mode` if missing, its
// parents too): refused unless it is a real directory (not a symlink),
// owned by the service's euid and writable by nobody else. Its mode is set
// to `mode`. Checks an operator-given root (the state dir, Ray's temp root)
// before anything is made below it.
absl::StatusOr<Fd> OpenServiceDir(const std::string& path, mode_t mode);

// Directory `name` in `parent` (a directory only the service can write),
// made if missing; refused when `name` is a symlink or not a directory.
// Its owner and mode are set through its own descriptor.
absl::StatusOr<Fd> EnsureDirAt(const Fd& parent, const std::string& name, mode_t mode, Owner owner = {});

// Writes `content` to file `name` in `parent` (a directory only the
// service can write): a fresh temporary (O_CREAT|O_EXCL|O_NOFOLLOW), owner
// and mode set on its descriptor, then renamed over `name`.
absl::Status WriteFileAt(const Fd& parent, const std::string& name, const std::string& content, mode_t mode,
                         Owner owner = {});

// Removes `name` in `parent` and everything below it without following a
// symlink: each directory is opened with O_NOFOLLOW from its parent's
// descriptor, each link is unlinked, not followed. OK when `name` is gone.
absl::Status RemoveTreeAt(const Fd& parent, const std::string& name);

}  // namespace relay::lifecycle
