// Name resolution and blocking I/O with deadlines for the rendezvous store.
#include "distributed/store_net.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "framework/error.h"

namespace hg::distributed {

StoreClock::time_point deadline_after(double seconds) {
  return StoreClock::now() +
         std::chrono::duration_cast<StoreClock::duration>(std::chrono::duration<double>(std::min(seconds, 1e7)));
}

bool resolution_error_is_permanent(int gai_error) {
  switch (gai_error) {
    case EAI_AGAIN:   // the name server did not answer (yet)
    case EAI_MEMORY:  // out of memory for the moment
    case EAI_SYSTEM:  // an errno-level failure, e.g. too many open files
      return false;
    default:  // EAI_NONAME, EAI_NODATA, EAI_FAIL, EAI_SERVICE, EAI_FAMILY, ...: retrying changes nothing
      return true;
  }
}

AddrList resolve(const std::string& host, int port, StoreClock::time_point deadline, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  for (;;) {
    addrinfo* found = nullptr;
    int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
    if (rc == 0) return AddrList(found, ::freeaddrinfo);
    const char* why = rc == EAI_SYSTEM ? std::strerror(errno) : ::gai_strerror(rc);
    if (resolution_error_is_permanent(rc))
      fail("distributed", "store: MASTER_ADDR '{}' cannot be resolved: {}", host, why);
    if (StoreClock::now() > deadline)
      fail("distributed", "store: MASTER_ADDR '{}' could not be resolved before the timeout: {}", host, why);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

bool recv_all(int fd, void* data, size_t n, StoreClock::time_point deadline) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - StoreClock::now()).count();
    if (left <= 0) return false;
    pollfd pfd{fd, POLLIN, 0};
    int rc = ::poll(&pfd, 1, static_cast<int>(std::min<long long>(left, 1000)));
    if (rc < 0 && errno != EINTR) return false;
    if (rc <= 0) continue;
    ssize_t got = ::recv(fd, p, n, 0);
    if (got == 0) return false;
    if (got < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return false;
    }
    p += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

bool send_all(int fd, const void* data, size_t n) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t sent = ::send(fd, p, n, MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += sent;
    n -= static_cast<size_t>(sent);
  }
  return true;
}

std::string address_text(const sockaddr* addr) {
  char text[INET6_ADDRSTRLEN] = {};
  if (addr->sa_family == AF_INET)
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(addr)->sin_addr, text, sizeof text);
  else if (addr->sa_family == AF_INET6)
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(addr)->sin6_addr, text, sizeof text);
  return text;
}

}  // namespace hg::distributed
