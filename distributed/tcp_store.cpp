// TcpStore's client side: connect (retrying while rank 0 is not up or is busy), the hello and the
// token's challenge-response, then one request at a time on a blocking socket. The wire format is
// in store_protocol.h.
#include "distributed/tcp_store.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "distributed/store_net.h"
#include "distributed/store_server.h"
#include "framework/error.h"

namespace hg::distributed {

TcpStoreOptions TcpStoreOptions::from_env(int world_size) {
  TcpStoreOptions o;
  if (const char* t = std::getenv("HG_DIST_TOKEN")) o.token = t;
  if (const char* b = std::getenv("HG_DIST_BIND_ALL")) o.bind_all = std::strcmp(b, "1") == 0;
  o.limits = store_limits_for_world(world_size);
  return o;
}

namespace {

// Reads an 'E' reply's message (its kind byte already read).
std::string read_refusal(int fd, StoreClock::time_point deadline) {
  char len[4];
  if (!recv_all(fd, len, 4, deadline)) return "(the reason was lost)";
  std::string msg(std::min<uint32_t>(get_u32(len), 4096), '\0');
  if (!recv_all(fd, msg.data(), msg.size(), deadline)) return "(the reason was lost)";
  return msg;
}

}  // namespace

TcpStore::TcpStore(const std::string& host, int port, bool is_server, double timeout_s, TcpStoreOptions options)
    : port_(port), token_(std::move(options.token)), timeout_s_(timeout_s) {
  HG_CHECK(port >= (is_server ? 0 : 1) && port < 65536, "distributed",
           "store: MASTER_PORT {} is not a TCP port (1-65535)", port);
  auto deadline = deadline_after(timeout_s);
  if (is_server) {
    server_ = std::make_unique<StoreServer>(host, port, options.bind_all, token_, options.limits, timeout_s);
    port_ = server_->port();
  }
  where_ = host + ":" + std::to_string(port_);
  std::string last_error = "no address";
  for (;;) {
    AddrList found = resolve(host, port_, deadline);
    bool busy = false;
    for (addrinfo* a = found.get(); a && fd_ < 0; a = a->ai_next) {
      int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) {
        last_error = std::strerror(errno);
        continue;
      }
      if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
        last_error = std::strerror(errno);
        ::close(fd);
        continue;
      }
      try {
        if (handshake(fd, deadline, &last_error) == Handshake::Ok) {
          fd_ = fd;
          break;
        }
      } catch (...) {
        ::close(fd);
        throw;
      }
      busy = true;
      ::close(fd);
    }
    if (fd_ >= 0) break;
    if (StoreClock::now() > deadline)
      fail("distributed", "store: could not reach MASTER_ADDR:MASTER_PORT = {} within {} s ({}); is rank 0 running?",
           where_, timeout_s, last_error);
    std::this_thread::sleep_for(std::chrono::milliseconds(busy ? 200 : 50));
  }
  int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  // A send into a store that stopped reading fails after the timeout instead of blocking forever.
  timeval tv{static_cast<time_t>(timeout_s),
             static_cast<suseconds_t>((timeout_s - static_cast<time_t>(timeout_s)) * 1e6)};
  ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

TcpStore::Handshake TcpStore::handshake(int fd, StoreClock::time_point deadline, std::string* why) {
  char hello[kHelloBytes];
  if (!recv_all(fd, hello, 1, deadline)) {
    *why = "the connection closed before the store's hello";
    return Handshake::Retry;
  }
  if (hello[0] == 'E') {  // busy: over its client limit or out of descriptors
    *why = read_refusal(fd, deadline);
    return Handshake::Retry;
  }
  if (hello[0] != 'H' || !recv_all(fd, hello + 1, kHelloBytes - 1, deadline) || hello[1] != kStoreVersion)
    fail("distributed", "store: {} is not a halfgrad store (version {}): is MASTER_PORT right?", where_, kStoreVersion);
  bool required = hello[2] & 1;
  if (required && token_.empty())
    fail("distributed", "store: rank 0's store at {} requires a token: set the same HG_DIST_TOKEN on every rank",
         where_);
  if (!required && !token_.empty())
    fail("distributed",
         "store: HG_DIST_TOKEN is set here but rank 0's store at {} does not require one: set the same "
         "HG_DIST_TOKEN on every rank",
         where_);
  if (!required) return Handshake::Ok;
  const auto* server_nonce = reinterpret_cast<const uint8_t*>(hello + 3);
  uint8_t client_nonce[kNonceBytes];
  random_bytes(client_nonce, kNonceBytes);
  Digest mine = client_proof(token_, server_nonce, client_nonce);
  std::vector<char> msg{'A'};
  msg.insert(msg.end(), client_nonce, client_nonce + kNonceBytes);
  msg.insert(msg.end(), mine.begin(), mine.end());
  char answer[33];
  if (!send_all(fd, msg.data(), msg.size()) || !recv_all(fd, answer, 1, deadline))
    fail("distributed", "store: rank 0's store at {} closed the connection during the token check", where_);
  if (answer[0] == 'E')
    fail("distributed",
         "store: rank 0's store at {} refused this rank: {}; HG_DIST_TOKEN must be the same on every rank", where_,
         read_refusal(fd, deadline));
  Digest theirs = server_proof(token_, server_nonce, client_nonce);
  if (answer[0] != 'K' || !recv_all(fd, answer + 1, 32, deadline) ||
      !digests_equal(theirs.data(), reinterpret_cast<const uint8_t*>(answer + 1), 32))
    fail("distributed", "store: the server at {} did not prove it knows HG_DIST_TOKEN", where_);
  return Handshake::Ok;
}

TcpStore::~TcpStore() {
  if (fd_ >= 0) ::close(fd_);
  server_.reset();
}

void TcpStore::refused(const std::string& what) {
  std::string why = read_refusal(fd_, deadline_after(timeout_s_));
  ::close(fd_);
  fd_ = -1;  // the server closes a refused connection
  fail("distributed", "store: rank 0's store at {} refused {}: {}", where_, what, why);
}

void TcpStore::set(const std::string& key, const std::vector<char>& value) {
  HG_CHECK(fd_ >= 0, "distributed", "store: the connection to {} was closed after a refusal", where_);
  HG_CHECK(value.size() <= UINT32_MAX && key.size() <= UINT32_MAX, "distributed",
           "store: '{}' ({} bytes) is too large for the store", key, value.size());
  std::vector<char> msg = encode_set(key, value);
  // A refused set is answered before its value is read: look for the answer even if sending failed.
  bool sent = send_all(fd_, msg.data(), msg.size());
  char ack = 0;
  bool got = recv_all(fd_, &ack, 1, deadline_after(sent ? timeout_s_ : std::min(timeout_s_, 5.0)));
  if (got && ack == 'E') refused(fmt::format("to set '{}' ({} bytes)", key, value.size()));
  HG_CHECK(got && ack == 'k', "distributed",
           "store: setting '{}' at {} failed: the connection to rank 0 broke or timed out", key, where_);
}

std::vector<char> TcpStore::get(const std::string& key) {
  HG_CHECK(fd_ >= 0, "distributed", "store: the connection to {} was closed after a refusal", where_);
  std::vector<char> msg = encode_get(key);
  HG_CHECK(send_all(fd_, msg.data(), msg.size()), "distributed",
           "store: asking {} for '{}' failed: the connection to rank 0 broke", where_, key);
  auto deadline = deadline_after(timeout_s_);
  char head[5];
  bool ok = recv_all(fd_, head, 1, deadline);
  if (ok && head[0] == 'E') refused(fmt::format("to get '{}'", key));
  HG_CHECK(ok, "distributed",
           "store: '{}' was not set at {} within {} s: a rank did not start or failed before the rendezvous", key,
           where_, timeout_s_);
  std::vector<char> value;
  ok = head[0] == 'V' && recv_all(fd_, head + 1, 4, deadline);
  if (ok) {
    uint32_t n = get_u32(head + 1);
    HG_CHECK(n <= (1u << 30), "distributed", "store: {} answered '{}' with a value of {} bytes", where_, key, n);
    value.resize(n);
    ok = recv_all(fd_, value.data(), value.size(), deadline);
  }
  HG_CHECK(ok, "distributed", "store: reading '{}' from {} failed: the connection to rank 0 broke", key, where_);
  return value;
}

std::string TcpStore::local_address() const {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  return address_text(reinterpret_cast<sockaddr*>(&addr));
}

}  // namespace hg::distributed
