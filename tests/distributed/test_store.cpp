// The rendezvous store on its own, loopback only (issue 40): SHA-256/HMAC against published
// vectors, the request parser's refusals, the limits, the token, the bind address, timeouts on
// stalled clients, descriptors released, and an accept loop that survives running out of
// descriptors. No case asserts on speed: waits are generous upper bounds.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <sys/resource.h>
#include <sys/wait.h>

#include <cstdio>
#include <thread>

#include "distributed/sha256.h"
#include "distributed/store_net.h"
#include "distributed/store_protocol.h"
#include "distributed/store_server.h"
#include "distributed/tcp_store.h"
#include "framework/error.h"
#include "tests/distributed/store_test_util.h"

namespace dist = hg::distributed;
using namespace store_test;

namespace {

std::string hex(const dist::Digest& d) {
  std::string s;
  for (uint8_t b : d) s += fmt::format("{:02x}", b);
  return s;
}

std::string error_of(auto&& f) {
  try {
    f();
  } catch (const hg::Error& e) {
    return e.what();
  }
  return "(no error)";
}

dist::TcpStoreOptions options(dist::StoreLimits limits = {}, std::string token = "") {
  dist::TcpStoreOptions o;
  o.limits = limits;
  o.token = std::move(token);
  return o;
}

// Feeds bytes to a fresh parser; the status of the first request and the parser's error.
std::pair<dist::RequestParser::Status, std::string> parse(const std::string& bytes, bool auth = false,
                                                          dist::StoreLimits limits = {}) {
  dist::ByteBudget budget{limits.max_total_bytes, 0};
  dist::RequestParser p(limits, budget, auth);
  const char* b = bytes.data();
  auto s = p.feed(&b, bytes.data() + bytes.size());
  return {s, p.error()};
}

template <class Pred>
bool eventually(Pred pred, double seconds = 60) {
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pred();
}

}  // namespace

TEST_CASE("SHA-256 and HMAC-SHA-256 match FIPS 180-4 and RFC 4231 vectors") {
  CHECK(hex(dist::sha256("")) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(hex(dist::sha256("abc")) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(hex(dist::sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")) ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(hex(dist::sha256(std::string(1000000, 'a'))) ==
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  // 55, 56 and 64 bytes: the padding's edge cases.
  CHECK(hex(dist::sha256(std::string(55, 'a'))) == "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
  CHECK(hex(dist::sha256(std::string(56, 'a'))) == "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
  CHECK(hex(dist::sha256(std::string(64, 'a'))) == "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
  CHECK(hex(dist::hmac_sha256(std::string(20, '\x0b'), "Hi There")) ==
        "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  CHECK(hex(dist::hmac_sha256("Jefe", "what do ya want for nothing?")) ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  CHECK(hex(dist::hmac_sha256(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First")) ==
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST_CASE("request parser: whole and byte-by-byte requests, and each refusal") {
  using S = dist::RequestParser::Status;
  dist::StoreLimits limits;
  limits.max_key_bytes = 8;
  limits.max_value_bytes = 16;
  limits.max_total_bytes = 20;
  std::string set = "S" + u32(3) + "key" + u32(5) + "value";
  for (size_t step : {set.size(), size_t{1}}) {
    dist::ByteBudget budget{limits.max_total_bytes, 0};
    dist::RequestParser p(limits, budget, false);
    S s = S::NeedMore;
    for (size_t i = 0; i < set.size(); i += step) {
      const char* b = set.data() + i;
      s = p.feed(&b, set.data() + std::min(set.size(), i + step));
      CHECK(b == set.data() + std::min(set.size(), i + step));
    }
    REQUIRE(s == S::Done);
    CHECK(p.request().kind == 'S');
    CHECK(p.request().key == "key");
    CHECK(std::string(p.request().value.begin(), p.request().value.end()) == "value");
    CHECK(budget.used == 8);  // reserved until taken or reset
    p.reset();
    CHECK(budget.used == 0);
  }
  CHECK(parse("X").second == "unknown request 0x58");
  CHECK(parse("GET / HTTP/1.1\r\n").first == S::Refused);
  CHECK(parse("G" + u32(9) + "123456789", false, limits).second == "a key of 9 bytes exceeds the limit of 8");
  CHECK(parse("S" + u32(1) + "k" + u32(17), false, limits).second == "a value of 17 bytes exceeds the limit of 16");
  CHECK(parse("S" + u32(1) + "k" + u32(0xffffffff), false, limits).first == S::Refused);
  CHECK(parse("S" + u32(8) + "12345678" + u32(16), false, limits).second ==
        "the store is full: a value of 16 bytes would exceed the limit of 20 bytes");
  CHECK(parse("S" + u32(1) + "k" + u32(1) + "v", true).second ==
        "authenticate first: this store requires HG_DIST_TOKEN");
  CHECK(parse(std::string("A") + std::string(64, 'x'), false).second == "unknown request 0x41");
  CHECK(parse(std::string("A") + std::string(64, 'x'), true).first == S::Done);
  CHECK(parse("S" + u32(1) + "k" + u32(4) + "va").first == S::NeedMore);
}

TEST_CASE("store: set and get across clients, a get waits for its key") {
  dist::TcpStore a("127.0.0.1", 0, true, 60, options());
  dist::TcpStore b("127.0.0.1", a.port(), false, 60, options());
  std::thread later([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    a.set("k", {'x', 'y'});
  });
  CHECK(b.get("k") == std::vector<char>{'x', 'y'});
  later.join();
  b.set("k", {'z'});  // overwriting frees the old value's bytes
  CHECK(a.get("k") == std::vector<char>{'z'});
  CHECK(a.server()->stats().bytes == 2);
  CHECK(a.server()->stats().keys == 1);
}

TEST_CASE("store limits: oversized values, too many keys and a full store are refused with a clear error") {
  dist::StoreLimits limits;
  limits.max_value_bytes = 1000;
  limits.max_total_bytes = 2500;
  limits.max_keys = 3;
  dist::TcpStore server("127.0.0.1", 0, true, 60, options(limits));
  auto client = [&] { return std::make_unique<dist::TcpStore>("127.0.0.1", server.port(), false, 60, options()); };
  auto c = client();
  CHECK(error_of([&] {
          c->set("big", std::vector<char>(1001));
        }).find("refused to set 'big' (1001 bytes): a value of 1001 bytes exceeds the limit of 1000") !=
        std::string::npos);
  // A refused client is closed; a new connection works.
  CHECK(error_of([&] { c->set("k", {'x'}); }).find("closed after a refusal") != std::string::npos);
  // 60 MB: refused from its header, without the server reading (or holding) it.
  c = client();
  CHECK(error_of([&] { c->set("huge", std::vector<char>(60 << 20)); }).find("exceeds the limit") != std::string::npos);
  c = client();
  c->set("a", std::vector<char>(1000));
  c->set("b", std::vector<char>(1000));
  CHECK(error_of([&] { c->set("c", std::vector<char>(1000)); }).find("the store is full") != std::string::npos);
  c = client();
  c->set("c", std::vector<char>(10));
  CHECK(error_of([&] { c->set("d", {'x'}); }).find("holds the limit of 3 keys") != std::string::npos);
  c = client();
  c->set("a", std::vector<char>(5));  // an existing key may be set again
  auto s = server.server()->stats();
  CHECK(s.keys == 3);
  CHECK(s.bytes <= limits.max_total_bytes);
  CHECK(s.dropped >= 4);
  CHECK(c->get("b").size() == 1000);
}

TEST_CASE("token: the right token works, a wrong or missing one is refused, the token never crosses the wire") {
  dist::TcpStore server("127.0.0.1", 0, true, 60, options({}, "s3cret"));
  const int port = server.port();
  dist::TcpStore good("127.0.0.1", port, false, 60, options({}, "s3cret"));
  good.set("k", {'v'});
  CHECK(server.get("k") == std::vector<char>{'v'});
  CHECK(error_of([&] {
          dist::TcpStore("127.0.0.1", port, false, 60, options({}, "guess"));
        }).find("refused this rank: wrong token (HG_DIST_TOKEN)") != std::string::npos);
  CHECK(error_of([&] {
          dist::TcpStore("127.0.0.1", port, false, 60, options());
        }).find("requires a token: set the same HG_DIST_TOKEN on every rank") != std::string::npos);
  // A raw client that skips the challenge can neither read nor write.
  for (std::string req : {"G" + u32(1) + "k", "S" + u32(1) + "k" + u32(1) + "x"}) {
    int fd = connect_loopback(port);
    REQUIRE(fd >= 0);
    CHECK(send_bytes(fd, req));
    bool closed = false;
    std::string got = read_until_closed(fd, 60, &closed);
    CHECK(closed);
    CHECK(got.size() > dist::kHelloBytes);
    CHECK(got[1 + 1] == 1);  // the hello's flags: a token is required
    CHECK(got.substr(dist::kHelloBytes).find("authenticate first") != std::string::npos);
    CHECK(got.find("s3cret") == std::string::npos);
    ::close(fd);
  }
  CHECK(server.get("k") == std::vector<char>{'v'});
  // A token set on a client of a store without one is a configuration error too.
  dist::TcpStore open_store("127.0.0.1", 0, true, 60, options());
  CHECK(error_of([&] {
          dist::TcpStore("127.0.0.1", open_store.port(), false, 60, options({}, "s3cret"));
        }).find("does not require one") != std::string::npos);
}

TEST_CASE("bind address: only MASTER_ADDR's interface by default, every interface with bind_all") {
  dist::TcpStore local("127.0.0.1", 0, true, 60, options());
  CHECK(local.server()->addresses() == std::vector<std::string>{"127.0.0.1"});
  // 127.0.0.2 is loopback too, but not the address the store was told to use.
  CHECK(connect_loopback(local.port(), "127.0.0.2") < 0);
  auto o = options();
  o.bind_all = true;
  dist::TcpStore all("127.0.0.1", 0, true, 60, o);
  const auto& where = all.server()->addresses();
  REQUIRE(where.size() == 1);
  CHECK((where[0] == "::" || where[0] == "0.0.0.0"));
  int fd = connect_loopback(all.port(), "127.0.0.2");
  CHECK(fd >= 0);
  if (fd >= 0) ::close(fd);
  // An address that is not this machine's (TEST-NET-1; bind() sends nothing) is a clear error.
  CHECK(error_of([] { dist::StoreServer("192.0.2.1", 0, false, "", {}, 5); }).find("HG_DIST_BIND_ALL=1") !=
        std::string::npos);
}

TEST_CASE("name resolution: a name that cannot exist fails at once, a transient failure would retry") {
  CHECK(dist::resolution_error_is_permanent(EAI_NONAME));
  CHECK(dist::resolution_error_is_permanent(EAI_FAIL));
  CHECK_FALSE(dist::resolution_error_is_permanent(EAI_AGAIN));
  CHECK_FALSE(dist::resolution_error_is_permanent(EAI_SYSTEM));
  // glibc refuses this name without asking any name server, so no packet leaves the machine.
  auto start = std::chrono::steady_clock::now();
  std::string e = error_of([] { dist::TcpStore("bad host!", 29500, false, 300, options()); });
  CHECK(e.find("MASTER_ADDR 'bad host!' cannot be resolved") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(200));  // not the 300 s timeout
  e = error_of([] { dist::TcpStore("bad host!", 0, true, 300, options()); });
  CHECK(e.find("cannot be resolved") != std::string::npos);
}

TEST_CASE("connections: released as soon as the client goes, bounded, and excess ones closed at once") {
  dist::StoreLimits limits;
  limits.max_clients = 8;
  dist::TcpStore server("127.0.0.1", 0, true, 60, options(limits));
  const size_t fds_before = open_fds();
  for (int i = 0; i < 1000; ++i) {
    int fd = connect_loopback(server.port());
    REQUIRE(fd >= 0);
    ::close(fd);
  }
  // Every one of them taken (and released) or refused, then only the store's own client is left.
  CHECK(eventually([&] {
    auto st = server.server()->stats();
    return st.accepted + st.refused >= 1001 && st.clients <= 1;
  }));
  CHECK(eventually([&] { return open_fds() <= fds_before + 2; }));
  // Hold 20: at most 8 are kept (the store's own client is one); the others are told and closed.
  std::vector<int> held;
  for (int i = 0; i < 20; ++i) held.push_back(connect_loopback(server.port()));
  int refused = 0;
  for (int fd : held) {
    bool closed = false;
    char first = 0;
    pollfd p{fd, POLLIN, 0};
    REQUIRE(::poll(&p, 1, 60000) == 1);
    if (::recv(fd, &first, 1, MSG_PEEK) <= 0 || first == 'E') {
      std::string got = read_until_closed(fd, 60, &closed);
      CHECK(closed);
      ++refused;
    }
  }
  CHECK(refused == 13);
  CHECK(eventually([&] { return server.server()->stats().clients == 8; }));
  for (int fd : held) ::close(fd);
  CHECK(eventually([&] { return server.server()->stats().clients == 1; }));
  dist::TcpStore late("127.0.0.1", server.port(), false, 60, options());
  late.set("ok", {'1'});
}

TEST_CASE("stalled and hostile clients are dropped while others are served") {
  dist::StoreLimits limits;
  limits.io_timeout_s = 0.5;
  dist::TcpStore server("127.0.0.1", 0, true, 60, options(limits));
  int silent = connect_loopback(server.port());     // never sends anything
  int half = connect_loopback(server.port());       // stops in the middle of a request
  int garbage = connect_loopback(server.port());    // speaks another protocol
  int oversized = connect_loopback(server.port());  // announces 60 MB
  REQUIRE((silent >= 0 && half >= 0 && garbage >= 0 && oversized >= 0));
  CHECK(send_bytes(half, "S" + u32(3) + "ke"));
  CHECK(send_bytes(garbage, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
  CHECK(send_bytes(oversized, "S" + u32(1) + "k" + u32(60u << 20)));
  dist::TcpStore other("127.0.0.1", server.port(), false, 60, options());
  other.set("still", {'o', 'k'});
  CHECK(server.get("still") == std::vector<char>{'o', 'k'});
  bool closed = false;
  // "GET / H..." reads as a get whose key length is " / H" as a number: refused from its length.
  CHECK(read_until_closed(garbage, 60, &closed).find("exceeds the limit of 4096") != std::string::npos);
  CHECK(closed);
  CHECK(read_until_closed(oversized, 60, &closed).find("exceeds the limit") != std::string::npos);
  CHECK(closed);
  read_until_closed(silent, 60, &closed);
  CHECK(closed);
  read_until_closed(half, 60, &closed);
  CHECK(closed);
  for (int fd : {silent, half, garbage, oversized}) ::close(fd);
  // A client that finished a request may idle longer than the timeout (ranks keep theirs open).
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  CHECK(other.get("still") == std::vector<char>{'o', 'k'});
  CHECK(server.server()->stats().dropped >= 4);
}

TEST_CASE("out of descriptors: the accept loop refuses clients instead of spinning, and recovers") {
  // The store runs in a child whose descriptor limit is low; this process connects.
  int to_child[2], from_child[2];
  REQUIRE(::pipe(to_child) == 0);
  REQUIRE(::pipe(from_child) == 0);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int rc = 1;
    try {
      rlimit lim{48, 48};
      ::setrlimit(RLIMIT_NOFILE, &lim);
      dist::StoreLimits limits;
      limits.max_clients = 1000;  // the descriptors run out first
      limits.io_timeout_s = 600;
      dist::StoreServer server("127.0.0.1", 0, false, "", limits, 10);
      int port = server.port();
      [[maybe_unused]] ssize_t w = ::write(from_child[1], &port, sizeof port);
      char go;
      [[maybe_unused]] ssize_t r = ::read(to_child[0], &go, 1);  // the parent is done
      auto s = server.stats();
      uint64_t report[2] = {s.accept_failures, s.wakeups};
      w = ::write(from_child[1], report, sizeof report);
      rc = 0;
    } catch (...) {
    }
    ::_exit(rc);
  }
  int port = 0;
  REQUIRE(::read(from_child[0], &port, sizeof port) == sizeof port);
  std::vector<int> held;
  for (int i = 0; i < 200; ++i) held.push_back(connect_loopback(port));
  int answered = 0, refused = 0;
  for (int fd : held) {
    pollfd p{fd, POLLIN, 0};
    if (fd < 0 || ::poll(&p, 1, 60000) != 1) continue;  // the store would hang it if it spun
    char first = 0;
    ++answered;
    if (::recv(fd, &first, 1, 0) <= 0 || first == 'E') ++refused;
  }
  CHECK(answered == 200);
  CHECK(refused > 100);
  for (int fd : held) ::close(fd);
  // Descriptors are back: a real client gets in.
  std::string e = error_of([&] {
    dist::TcpStore c("127.0.0.1", port, false, 60, options());
    c.set("k", {'v'});
  });
  CHECK(e == "(no error)");
  char go = 1;
  CHECK(::write(to_child[1], &go, 1) == 1);
  uint64_t report[2] = {};
  CHECK(::read(from_child[0], report, sizeof report) == sizeof report);
  int status = 0;
  ::waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(report[0] > 0);  // it did run out
  // Each connection costs a few turns of the loop; a spinning loop turns millions of times.
  MESSAGE("accept failures ", report[0], ", loop turns ", report[1]);
  CHECK(report[1] < 20000);
  for (int fd : {to_child[0], to_child[1], from_child[0], from_child[1]}) ::close(fd);
}
