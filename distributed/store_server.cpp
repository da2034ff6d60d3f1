// StoreServer's poll loop. Each connection is a small state machine: hello sent, then requests
// parsed as their bytes arrive (RequestParser), one at a time; a get whose key is not set yet
// parks the connection until a set wakes it. Deadlines (StoreLimits::io_timeout_s) drop a client
// that stalls in the middle of something; one that is between requests may idle.
#include "distributed/store_server.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <list>
#include <map>
#include <mutex>
#include <system_error>

#include "distributed/store_net.h"
#include "framework/error.h"

namespace hg::distributed {

namespace {

using Clock = StoreClock;

struct Conn {
  Conn(int fd, const StoreLimits& limits, ByteBudget& budget, bool expect_auth)
      : fd(fd), parser(limits, budget, expect_auth) {}
  int fd;
  RequestParser parser;
  std::vector<char> in;  // received bytes not parsed yet (a request arrived behind another)
  size_t in_off = 0;
  std::vector<char> out;  // reply head, then out_value (shared with the store, never copied)
  size_t out_off = 0;
  std::shared_ptr<const std::vector<char>> out_value;
  size_t value_off = 0;
  uint8_t nonce[kNonceBytes] = {};
  bool served = false;   // completed a request: may idle between requests from now on
  bool waiting = false;  // a get parked until wait_key is set
  std::string wait_key;
  bool closing = false;  // refused: flush the reply, then discard input until the peer closes
  bool dead = false;
  bool has_deadline = false;
  Clock::time_point deadline;

  bool out_pending() const { return out_off < out.size() || (out_value && value_off < out_value->size()); }
};

struct Entry {
  std::shared_ptr<const std::vector<char>> value;
  size_t bytes = 0;  // key and value, as counted in the budget
};

}  // namespace

struct StoreServer::Loop {
  StoreLimits limits;
  std::string token;
  ByteBudget budget;
  std::list<Conn> conns;
  std::map<std::string, Entry> data;
  int reserve_fd = -1;  // given up to accept (and close) a client when descriptors run out
  Clock::time_point accept_paused_until{};
  mutable std::mutex stats_mutex;
  Stats stats;

  void count(uint64_t Stats::*field) {
    std::lock_guard lock(stats_mutex);
    ++(stats.*field);
  }

  void publish() {
    std::lock_guard lock(stats_mutex);
    stats.clients = conns.size();
    stats.keys = data.size();
    stats.bytes = budget.used;
  }

  static void send_now(int fd, const std::vector<char>& msg) {
    // Best effort on a fresh non-blocking socket: a short refusal fits its send buffer.
    [[maybe_unused]] ssize_t n = ::send(fd, msg.data(), msg.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  }

  void refuse(Conn& c, const std::string& why) {
    c.out = encode_error(why);
    c.out_off = 0;
    c.out_value.reset();
    c.closing = true;
    c.waiting = false;
    c.has_deadline = false;
    count(&Stats::dropped);
  }

  void reply(Conn& c, std::vector<char> head, std::shared_ptr<const std::vector<char>> value = nullptr) {
    c.out = std::move(head);
    c.out_off = 0;
    c.out_value = std::move(value);
    c.value_off = 0;
  }

  static std::vector<char> value_head(const std::vector<char>& value) {
    std::vector<char> head{'V'};
    put_u32(head, static_cast<uint32_t>(value.size()));
    return head;
  }

  void handle(Conn& c, StoreRequest& r) {
    c.served = true;
    if (r.kind == 'A') {
      Digest want = client_proof(token, c.nonce, r.client_nonce);
      if (!digests_equal(want.data(), r.mac, want.size())) return refuse(c, "wrong token (HG_DIST_TOKEN)");
      Digest proof = server_proof(token, c.nonce, r.client_nonce);
      std::vector<char> head{'K'};
      head.insert(head.end(), proof.begin(), proof.end());
      return reply(c, std::move(head));
    }
    if (r.kind == 'G') {
      auto it = data.find(r.key);
      if (it != data.end()) return reply(c, value_head(*it->second.value), it->second.value);
      c.waiting = true;
      c.wait_key = r.key;
      return;
    }
    // 'S'
    auto it = data.find(r.key);
    if (it == data.end() && data.size() >= limits.max_keys)
      return refuse(c, fmt::format("the store is full: it holds the limit of {} keys", limits.max_keys));
    Entry e{std::make_shared<const std::vector<char>>(std::move(r.value)), c.parser.take_reserved()};
    if (it != data.end()) {
      budget.release(it->second.bytes);
      it->second = e;
    } else {
      data.emplace(r.key, e);
    }
    for (Conn& w : conns)
      if (w.waiting && w.wait_key == r.key) {
        w.waiting = false;
        w.wait_key.clear();
        reply(w, value_head(*e.value), e.value);
        w.has_deadline = false;
      }
    reply(c, {'k'});
  }

  // Parses buffered input while the connection is free to take a request.
  void process(Conn& c) {
    while (!c.dead && !c.closing && !c.waiting && !c.out_pending() && c.in_off < c.in.size()) {
      const char* p = c.in.data() + c.in_off;
      const char* end = c.in.data() + c.in.size();
      RequestParser::Status s = c.parser.feed(&p, end);
      c.in_off = static_cast<size_t>(p - c.in.data());
      if (s == RequestParser::Status::Refused) {
        refuse(c, c.parser.error());
      } else if (s == RequestParser::Status::Done) {
        c.has_deadline = false;
        handle(c, c.parser.request());
        c.parser.reset();
      }
    }
    if (c.in_off == c.in.size()) c.in.clear(), c.in_off = 0;
  }

  void read_from(Conn& c) {
    char buf[65536];
    ssize_t got = ::recv(c.fd, buf, sizeof buf, 0);
    if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN)) {
      c.dead = true;
      return;
    }
    if (got < 0 || c.closing) return;  // a refused client's further bytes are discarded
    c.in.insert(c.in.end(), buf, buf + got);
    process(c);
  }

  void write_to(Conn& c) {
    while (c.out_pending()) {
      const char* p;
      size_t n;
      if (c.out_off < c.out.size()) {
        p = c.out.data() + c.out_off, n = c.out.size() - c.out_off;
      } else {
        p = c.out_value->data() + c.value_off, n = c.out_value->size() - c.value_off;
      }
      ssize_t sent = ::send(c.fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (sent < 0) {
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) c.dead = true;
        return;
      }
      if (c.out_off < c.out.size())
        c.out_off += static_cast<size_t>(sent);
      else
        c.value_off += static_cast<size_t>(sent);
    }
    c.out.clear(), c.out_off = 0, c.out_value.reset(), c.value_off = 0;
    // A refusal is out: stop sending, and read until the peer closes, so its unread request does
    // not turn the close into a reset that could destroy the refusal before the client reads it.
    if (c.closing) ::shutdown(c.fd, SHUT_WR);
    process(c);
  }

  void accept_from(int listen_fd, Clock::time_point now) {
    for (int i = 0; i < 64; ++i) {
      int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        int err = errno;
        if (err == EINTR || err == ECONNABORTED) continue;
        if (err == EAGAIN || err == EWOULDBLOCK) return;
        count(&Stats::accept_failures);
        bool out_of_fds = err == EMFILE || err == ENFILE;
        if (out_of_fds && reserve_fd >= 0) {
          // Out of descriptors: the waiting client would keep the listener readable and the loop
          // spinning. Free the reserve, take the client, tell it and close it, then re-arm.
          ::close(reserve_fd);
          reserve_fd = -1;
          int victim = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
          if (victim >= 0) {
            send_now(victim, encode_error("rank 0 is out of file descriptors; try again"));
            ::close(victim);
            count(&Stats::refused);
          }
          reserve_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
        }
        // Whatever else failed, or the reserve could not be re-armed: stop accepting for a moment.
        if (reserve_fd < 0 || !out_of_fds) accept_paused_until = now + std::chrono::milliseconds(100);
        return;
      }
      if (static_cast<int>(conns.size()) >= limits.max_clients) {
        send_now(
            fd, encode_error(fmt::format("rank 0's store has its limit of {} clients; try again", limits.max_clients)));
        ::close(fd);
        count(&Stats::refused);
        continue;
      }
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      Conn& c = conns.emplace_back(fd, limits, budget, !token.empty());
      random_bytes(c.nonce, kNonceBytes);
      std::vector<char> hello{'H', static_cast<char>(kStoreVersion), static_cast<char>(token.empty() ? 0 : 1)};
      hello.insert(hello.end(), c.nonce, c.nonce + kNonceBytes);
      reply(c, std::move(hello));
      count(&Stats::accepted);
    }
  }

  void run(const std::vector<int>& listen_fds, int wake_fd) {
    reserve_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    std::vector<pollfd> fds;
    std::vector<Conn*> polled;
    for (;;) {
      auto now = Clock::now();
      fds.clear();
      polled.clear();
      fds.push_back({wake_fd, POLLIN, 0});
      bool accepting = now >= accept_paused_until;
      for (int l : listen_fds) fds.push_back({l, static_cast<short>(accepting ? POLLIN : 0), 0});
      auto next = now + std::chrono::seconds(60);
      if (!accepting) next = std::min(next, accept_paused_until);
      for (Conn& c : conns) {
        // Only a connection free to take a request is read; a parked one is watched for its
        // peer going away, so unread bytes cannot wake the loop again and again.
        short ev = c.waiting ? POLLRDHUP : (c.out_pending() && !c.closing) ? 0 : POLLIN;
        if (c.out_pending()) ev |= POLLOUT;
        bool needs_deadline = !c.served || c.parser.in_progress() || c.out_pending() || c.closing;
        if (!needs_deadline) c.has_deadline = false;
        if (needs_deadline && !c.has_deadline) c.has_deadline = true, c.deadline = now + timeout();
        if (c.has_deadline) next = std::min(next, c.deadline);
        fds.push_back({c.fd, ev, 0});
        polled.push_back(&c);
      }
      int wait_ms = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count()) + 1;
      int rc = ::poll(fds.data(), fds.size(), std::max(wait_ms, 0));
      count(&Stats::wakeups);
      if (rc < 0 && errno != EINTR) break;
      if (fds[0].revents) break;  // the destructor's wake-up: stop
      now = Clock::now();
      for (size_t i = 0; i < polled.size(); ++i) {
        Conn& c = *polled[i];
        short re = fds[1 + listen_fds.size() + i].revents;
        try {
          if (re & (POLLERR | POLLNVAL | POLLRDHUP | POLLHUP)) {
            if (!(re & POLLIN) || c.waiting) c.dead = true;
          }
          if (!c.dead && (re & POLLOUT)) write_to(c);
          if (!c.dead && (re & POLLIN)) read_from(c);
        } catch (const std::exception&) {
          c.dead = true;  // out of memory for this client's request: drop it, keep serving
        }
        if (!c.dead && c.has_deadline && now > c.deadline) {
          c.dead = true;
          if (!c.closing) count(&Stats::dropped);
        }
      }
      for (auto it = conns.begin(); it != conns.end();) {
        if (it->dead) {
          ::close(it->fd);
          it = conns.erase(it);
        } else {
          ++it;
        }
      }
      // New clients after the departed ones are reaped, so a slot freed this turn is reusable.
      for (size_t i = 0; i < listen_fds.size(); ++i)
        if (fds[1 + i].revents & POLLIN) accept_from(listen_fds[i], now);
      publish();
    }
    for (Conn& c : conns) ::close(c.fd);
    conns.clear();
    if (reserve_fd >= 0) ::close(reserve_fd);
  }

  Clock::duration timeout() const {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limits.io_timeout_s));
  }
};

StoreServer::StoreServer(const std::string& host, int port, bool bind_all, std::string token, StoreLimits limits,
                         double resolve_timeout_s)
    : port_(port), loop_(std::make_unique<Loop>()) {
  loop_->limits = limits;
  loop_->token = std::move(token);
  loop_->budget.limit = limits.max_total_bytes;
  try {
    std::string last_error;
    if (bind_all) {
      sockaddr_in6 any6{};
      any6.sin6_family = AF_INET6;
      any6.sin6_addr = in6addr_any;
      any6.sin6_port = htons(static_cast<uint16_t>(port_));
      if (listen_on(reinterpret_cast<sockaddr*>(&any6), sizeof any6, &last_error) == EAFNOSUPPORT) {
        sockaddr_in any4{};  // no IPv6 here: every IPv4 interface
        any4.sin_family = AF_INET;
        any4.sin_addr.s_addr = htonl(INADDR_ANY);
        any4.sin_port = htons(static_cast<uint16_t>(port_));
        listen_on(reinterpret_cast<sockaddr*>(&any4), sizeof any4, &last_error);
      }
      if (listen_fds_.empty()) fail("distributed", "store: {}", last_error);
    } else {
      AddrList found = resolve(host, port, deadline_after(resolve_timeout_s));
      for (addrinfo* a = found.get(); a; a = a->ai_next) {
        if (a->ai_family == AF_INET) reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_port = htons(port_);
        if (a->ai_family == AF_INET6) reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_port = htons(port_);
        int err = listen_on(a->ai_addr, a->ai_addrlen, &last_error);
        // An address of the name that is not this machine's (or of a family it lacks) is skipped:
        // the others may do. Anything else (the port is taken) is an error at once.
        if (err != 0 && err != EADDRNOTAVAIL && err != EAFNOSUPPORT) fail("distributed", "store: {}", last_error);
      }
      if (listen_fds_.empty())
        fail("distributed",
             "store: {}; MASTER_ADDR '{}' must name an address of rank 0's machine (or set HG_DIST_BIND_ALL=1 to "
             "listen on every interface)",
             last_error, host);
    }
    HG_CHECK(::pipe2(wake_, O_CLOEXEC) == 0, "distributed", "store: pipe() failed: {}", std::strerror(errno));
  } catch (...) {
    for (int fd : listen_fds_) ::close(fd);
    throw;
  }
  try {
    thread_ = std::thread([this] { loop_->run(listen_fds_, wake_[0]); });
  } catch (const std::system_error& e) {  // no thread to be had: an hg::Error, not a std:: one
    for (int fd : listen_fds_) ::close(fd);
    ::close(wake_[0]);
    ::close(wake_[1]);
    fail("distributed", "store: cannot start the store's thread: {}", e.what());
  }
}

int StoreServer::listen_on(const sockaddr* addr, socklen_t len, std::string* error) {
  int fd = ::socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int one = 1, zero = 0;
  if (fd >= 0) {
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (addr->sa_family == AF_INET6) ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
  }
  if (fd < 0 || ::bind(fd, addr, len) != 0 || ::listen(fd, 128) != 0) {
    int err = errno;
    if (fd >= 0) ::close(fd);
    *error = fmt::format("rank 0 cannot listen on {} port {} (MASTER_PORT): {}", address_text(addr), port_,
                         std::strerror(err));
    return err;
  }
  if (port_ == 0) {  // the first address picked a free port: the others take the same
    sockaddr_storage bound{};
    socklen_t blen = sizeof bound;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &blen);
    port_ = ntohs(bound.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&bound)->sin_port
                                             : reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
  }
  listen_fds_.push_back(fd);
  addresses_.push_back(address_text(addr));
  return 0;
}

StoreServer::~StoreServer() {
  char b = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_[1], &b, 1);
  if (thread_.joinable()) thread_.join();
  for (int fd : listen_fds_) ::close(fd);
  ::close(wake_[0]);
  ::close(wake_[1]);
}

StoreServer::Stats StoreServer::stats() const {
  std::lock_guard lock(loop_->stats_mutex);
  return loop_->stats;
}

}  // namespace hg::distributed
