// TcpStore: a thread per connection on the server (world sizes are small), length-prefixed
// messages. Request: kind ('S' set or 'G' get), u32 key length, key, and for 'S' u32 value
// length, value. Reply: 'S' -> one byte; 'G' -> u32 value length, value (sent once the key is set).
#include "distributed/tcp_store.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "framework/error.h"

namespace hg::distributed {

namespace {

using Clock = std::chrono::steady_clock;

// Waits until fd is readable; false when the deadline passed or stop was raised.
bool wait_readable(int fd, Clock::time_point deadline, const std::atomic<bool>* stop) {
  for (;;) {
    if (stop && stop->load()) return false;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    int rc = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, stop ? 100 : left)));
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) return false;
  }
}

// Reads exactly n bytes; false on a closed connection, an error, the deadline or stop.
bool recv_all(int fd, void* data, size_t n, Clock::time_point deadline, const std::atomic<bool>* stop = nullptr) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    if (!wait_readable(fd, deadline, stop)) return false;
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

bool send_blob(int fd, const char* data, size_t n) {
  auto len = static_cast<uint32_t>(n);
  return send_all(fd, &len, sizeof len) && send_all(fd, data, n);
}

bool recv_blob(int fd, std::vector<char>& out, Clock::time_point deadline, const std::atomic<bool>* stop = nullptr) {
  uint32_t len = 0;
  if (!recv_all(fd, &len, sizeof len, deadline, stop)) return false;
  if (len > (64u << 20)) return false;  // a store holds addresses and ids, never megabytes
  out.resize(len);
  return recv_all(fd, out.data(), len, deadline, stop);
}

Clock::time_point never() { return Clock::now() + std::chrono::hours(24 * 365); }

}  // namespace

struct TcpStore::Server {
  int listen_fd = -1;
  std::atomic<bool> stop{false};
  std::mutex m;
  std::condition_variable cv;
  std::map<std::string, std::vector<char> > data;
  std::vector<int> client_fds;
  std::vector<std::thread> handlers;
  std::thread acceptor;

  explicit Server(int port) {
    listen_fd = ::socket(AF_INET, SOCK_STREAM, 0);
    HG_CHECK(listen_fd >= 0, "distributed", "store: socket() failed: {}", std::strerror(errno));
    int one = 1;
    ::setsockopt(listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    if (::bind(listen_fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(listen_fd, 128) != 0) {
      int err = errno;
      ::close(listen_fd);
      fail("distributed", "store: rank 0 cannot listen on MASTER_PORT {}: {}", port, std::strerror(err));
    }
    acceptor = std::thread([this] { accept_loop(); });
  }

  ~Server() {
    stop = true;
    cv.notify_all();
    ::shutdown(listen_fd, SHUT_RDWR);
    acceptor.join();
    {
      std::lock_guard lock(m);
      for (int fd : client_fds) ::shutdown(fd, SHUT_RDWR);
    }
    for (auto& t : handlers) t.join();
    for (int fd : client_fds) ::close(fd);
    ::close(listen_fd);
  }

  void accept_loop() {
    while (!stop) {
      if (!wait_readable(listen_fd, never(), &stop)) continue;  // woken by stop: the loop ends
      int fd = ::accept(listen_fd, nullptr, nullptr);
      if (fd < 0) continue;
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      std::lock_guard lock(m);
      client_fds.push_back(fd);
      handlers.emplace_back([this, fd] { serve(fd); });
    }
  }

  void serve(int fd) {
    for (;;) {
      char kind = 0;
      std::vector<char> key;
      if (!recv_all(fd, &kind, 1, never(), &stop) || !recv_blob(fd, key, never(), &stop)) return;
      std::string k(key.begin(), key.end());
      if (kind == 'S') {
        std::vector<char> value;
        if (!recv_blob(fd, value, never(), &stop)) return;
        {
          std::lock_guard lock(m);
          data[k] = std::move(value);
        }
        cv.notify_all();
        char ack = 'k';
        if (!send_all(fd, &ack, 1)) return;
      } else if (kind == 'G') {
        std::vector<char> value;
        {
          std::unique_lock lock(m);
          while (!stop && !data.count(k)) cv.wait_for(lock, std::chrono::milliseconds(100));
          if (stop) return;
          value = data[k];
        }
        if (!send_blob(fd, value.data(), value.size())) return;
      } else {
        return;  // not a store client: drop the connection
      }
    }
  }
};

TcpStore::TcpStore(const std::string& host, int port, bool is_server, double timeout_s)
    : where_(host + ":" + std::to_string(port)), timeout_s_(timeout_s) {
  HG_CHECK(port > 0 && port < 65536, "distributed", "store: MASTER_PORT {} is not a TCP port (1-65535)", port);
  if (is_server) server_ = std::make_unique<Server>(port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  std::string last_error = "no address";
  while (fd_ < 0) {
    addrinfo* found = nullptr;
    int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
    if (rc != 0) {
      last_error = ::gai_strerror(rc);
    } else {
      for (addrinfo* a = found; a && fd_ < 0; a = a->ai_next) {
        int fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        if (fd < 0) continue;
        if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
          fd_ = fd;
        } else {
          last_error = std::strerror(errno);
          ::close(fd);
        }
      }
      ::freeaddrinfo(found);
    }
    if (fd_ >= 0) break;
    if (Clock::now() > deadline)
      fail("distributed", "store: could not reach MASTER_ADDR:MASTER_PORT = {} within {} s ({}); is rank 0 running?",
           where_, timeout_s, last_error);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

TcpStore::~TcpStore() {
  if (fd_ >= 0) ::close(fd_);
  server_.reset();
}

void TcpStore::set(const std::string& key, const std::vector<char>& value) {
  char kind = 'S', ack = 0;
  bool ok =
      send_all(fd_, &kind, 1) && send_blob(fd_, key.data(), key.size()) && send_blob(fd_, value.data(), value.size());
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s_));
  HG_CHECK(ok && recv_all(fd_, &ack, 1, deadline), "distributed",
           "store: setting '{}' at {} failed: the connection to rank 0 broke or timed out", key, where_);
}

std::vector<char> TcpStore::get(const std::string& key) {
  char kind = 'G';
  HG_CHECK(send_all(fd_, &kind, 1) && send_blob(fd_, key.data(), key.size()), "distributed",
           "store: asking {} for '{}' failed: the connection to rank 0 broke", where_, key);
  std::vector<char> value;
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s_));
  HG_CHECK(recv_blob(fd_, value, deadline), "distributed",
           "store: '{}' was not set at {} within {} s: a rank did not start or failed before the rendezvous", key,
           where_, timeout_s_);
  return value;
}

std::string TcpStore::local_address() const {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  char text[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET)
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&addr)->sin_addr, text, sizeof text);
  else
    ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&addr)->sin6_addr, text, sizeof text);
  return text;
}

}  // namespace hg::distributed
