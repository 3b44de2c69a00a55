#include "free_ports.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace relay::lifecycle {

absl::StatusOr<std::vector<int>> FreePorts(int n) {
  std::vector<int> fds, ports;
  absl::Status status;
  for (int i = 0; i < n && status.ok(); ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      status = absl::UnavailableError("socket: " + std::string(std::strerror(errno)));
      break;
    }
    fds.push_back(fd);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t len = sizeof a;
    int rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    if (rc == 0) rc = ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    if (rc != 0) status = absl::UnavailableError("no free port: " + std::string(std::strerror(errno)));
    ports.push_back(static_cast<int>(ntohs(a.sin_port)));
  }
  for (int fd : fds) ::close(fd);
  if (!status.ok()) return status;
  return ports;
}

}  // namespace relay::lifecycle
