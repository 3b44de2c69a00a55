#include "safe_fs.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"

namespace relay::lifecycle {
namespace {

absl::Status Errno(const std::string& what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
}

bool PlainName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos;
}

// Sets owner (when given) and mode on an open descriptor: never by path.
absl::Status OwnAndMode(int fd, const std::string& what, mode_t mode, Owner owner) {
  if (owner.uid >= 0) {
    gid_t gid = static_cast<gid_t>(owner.gid >= 0 ? owner.gid : owner.uid);
    if (::fchown(fd, static_cast<uid_t>(owner.uid), gid) != 0) {
      return Errno(absl::StrCat("cannot give ", what, " to uid ", owner.uid));
    }
  }
  if (::fchmod(fd, mode) != 0) return Errno("cannot chmod " + what);
  return absl::OkStatus();
}

// Removes every entry of the open directory `dir` (consumed), depth first.
absl::Status EmptyDir(int dir, const std::string& what) {
  DIR* d = ::fdopendir(dir);
  if (!d) {
    ::close(dir);
    return Errno("cannot list " + what);
  }
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(std::move(n));
  }
  absl::Status st;
  for (const auto& n : names) {
    // A subdirectory is opened without following a link: if the entry was
    // swapped for a symlink meanwhile, ELOOP/ENOTDIR and it is unlinked as
    // a link, never walked into.
    int sub = ::openat(::dirfd(d), n.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub >= 0) {
      absl::Status inner = EmptyDir(sub, what + "/" + n);
      if (inner.ok() && ::unlinkat(::dirfd(d), n.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT) {
        inner = Errno("cannot remove " + what + "/" + n);
      }
      if (!inner.ok() && st.ok()) st = inner;
    } else if (::unlinkat(::dirfd(d), n.c_str(), 0) != 0 && errno != ENOENT && st.ok()) {
      st = Errno("cannot remove " + what + "/" + n);
    }
  }
  ::closedir(d);
  return st;
}

}  // namespace

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

Fd::~Fd() {
  if (fd_ >= 0) ::close(fd_);
}

absl::StatusOr<Fd> OpenServiceDir(const std::string& path, mode_t mode) {
  if (path.empty()) return absl::InvalidArgumentError("empty directory path");
  // Parents first (operator-given, e.g. /var/lib/relay): 0755 when made.
  for (size_t slash = path.find('/', 1); slash != std::string::npos; slash = path.find('/', slash + 1)) {
    std::string parent = path.substr(0, slash);
    if (::mkdir(parent.c_str(), 0755) != 0 && errno != EEXIST) return Errno("cannot create " + parent);
  }
  if (::mkdir(path.c_str(), mode) != 0 && errno != EEXIST) return Errno("cannot create " + path);
  Fd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (fd.get() < 0) {
    if (errno == ELOOP || errno == ENOTDIR) {
      return absl::FailedPreconditionError(path + " is a symlink or not a directory: the service's directories "
                                                  "must be its own (remove it, or configure another path)");
    }
    return Errno("cannot open " + path);
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return Errno("cannot stat " + path);
  if (st.st_uid != ::geteuid()) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, " belongs to uid ", st.st_uid, ", not to this service (uid ", ::geteuid(),
        "): someone else made it first, so what lies below it is theirs to replace; remove it or configure another "
        "path"));
  }
  if (::fchmod(fd.get(), mode) != 0) return Errno("cannot chmod " + path);
  return fd;
}

absl::StatusOr<Fd> EnsureDirAt(const Fd& parent, const std::string& name, mode_t mode, Owner owner) {
  if (!PlainName(name)) return absl::InvalidArgumentError("'" + name + "' is not a plain file name");
  if (::mkdirat(parent.get(), name.c_str(), 0700) != 0 && errno != EEXIST) return Errno("cannot create " + name);
  Fd fd(::openat(parent.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (fd.get() < 0) {
    if (errno == ELOOP || errno == ENOTDIR) {
      return absl::FailedPreconditionError(name + " is a symlink or not a directory; refused");
    }
    return Errno("cannot open " + name);
  }
  absl::Status st = OwnAndMode(fd.get(), name, mode, owner);
  if (!st.ok()) return st;
  return fd;
}

absl::Status WriteFileAt(const Fd& parent, const std::string& name, const std::string& content, mode_t mode,
                         Owner owner) {
  if (!PlainName(name)) return absl::InvalidArgumentError("'" + name + "' is not a plain file name");
  std::string tmp = name + ".tmp";
  // A temporary left by a crash is ours (only the service writes here).
  if (::unlinkat(parent.get(), tmp.c_str(), 0) != 0 && errno != ENOENT) return Errno("cannot remove " + tmp);
  Fd fd(::openat(parent.get(), tmp.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (fd.get() < 0) return Errno("cannot create " + tmp);
  absl::Status st;
  if (::write(fd.get(), content.data(), content.size()) != static_cast<ssize_t>(content.size())) {
    st = Errno("cannot write " + tmp);
  }
  if (st.ok()) st = OwnAndMode(fd.get(), tmp, mode, owner);
  if (st.ok() && ::renameat(parent.get(), tmp.c_str(), parent.get(), name.c_str()) != 0) {
    st = Errno("cannot rename " + tmp + " to " + name);
  }
  if (!st.ok()) ::unlinkat(parent.get(), tmp.c_str(), 0);
  return st;
}

absl::Status RemoveTreeAt(const Fd& parent, const std::string& name) {
  if (!PlainName(name)) return absl::InvalidArgumentError("'" + name + "' is not a plain file name");
  int dir = ::openat(parent.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dir < 0) {
    if (errno == ENOENT) return absl::OkStatus();
    // A link or a file where a directory was: removed as what it is.
    if ((errno == ELOOP || errno == ENOTDIR) && (::unlinkat(parent.get(), name.c_str(), 0) == 0 || errno == ENOENT)) {
      return absl::OkStatus();
    }
    return Errno("cannot remove " + name);
  }
  absl::Status st = EmptyDir(dir, name);
  if (!st.ok()) return st;
  if (::unlinkat(parent.get(), name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT) return Errno("cannot remove " + name);
  return absl::OkStatus();
}

}  // namespace relay::lifecycle
