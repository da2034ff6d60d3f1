// The store under attack (issue 40), run by run_torchrun.sh --hostile: a hostile client
// (--hostile-client) floods rank 0's store on MASTER_PORT with connections, garbage, idle
// connections and 60 MB values while a 2-rank Gloo job (--under-attack) meets and all-reduces;
// once the job is up it fills the store until refused. Rank 0 watches its own descriptors and
// memory; the job must succeed with both bounded. Loopback only, bounded in count and time.
#include <halfgrad.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "distributed/process_group.h"
#include "tests/distributed/store_test_util.h"

namespace dist = hg::distributed;
using namespace store_test;
using Clock = std::chrono::steady_clock;

namespace {

std::string attack_dir() {
  const char* d = std::getenv("HG_TEST_ATTACK_DIR");
  return d ? d : "/tmp";
}

bool exists(const std::string& path) { return std::ifstream(path).good(); }

void touch(const std::string& path) { std::ofstream(path) << "1\n"; }

long status_kb(const char* field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(field, 0) == 0) return std::atol(line.c_str() + std::strlen(field));
  return -1;
}

// Reads the hello (or a refusal) and answers to one request; the kind byte of the answer, 0 when closed.
char first_byte(int fd, double seconds) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(seconds * 1000)) != 1) return 0;
  char c = 0;
  return ::recv(fd, &c, 1, 0) == 1 ? c : 0;
}

// A set's head: 'S', the key's length, the key, the value's length (gcc 12 warns falsely on
// chains of std::string operator+, so it is appended piece by piece).
std::string set_head(const std::string& key, uint32_t value_bytes) {
  std::string s = "S";
  s += u32(static_cast<uint32_t>(key.size()));
  s += key;
  s += u32(value_bytes);
  return s;
}

bool skip_hello(int fd) {
  char rest[64];
  if (first_byte(fd, 60) != 'H') return false;
  size_t need = 2 + 32, got = 0;
  while (got < need) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 60000) != 1) return false;
    ssize_t n = ::recv(fd, rest, need - got, 0);
    if (n <= 0) return false;
    got += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

int hostile_client() {
  const int port = std::atoi(std::getenv("MASTER_PORT"));
  const std::string dir = attack_dir();
  auto give_up = Clock::now() + std::chrono::seconds(240);
  int fd = -1;
  while (fd < 0 && Clock::now() < give_up) {
    fd = connect_loopback(port);
    if (fd < 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (fd < 0) return std::printf("hostile: the store never came up\n"), 1;
  ::close(fd);
  // 1. A flood of connect-and-close.
  for (int i = 0; i < 3000; ++i)
    if (int c = connect_loopback(port); c >= 0) ::close(c);
  // 2. Idle connections, more than the store takes: the excess must be refused at once.
  std::vector<int> idle;
  for (int i = 0; i < 600; ++i)
    if (int c = connect_loopback(port); c >= 0) idle.push_back(c);
  int excess_refused = 0;
  for (int c : idle)
    if (first_byte(c, 60) != 'H') ++excess_refused;
  // 3. Garbage.
  for (int i = 0; i < 50; ++i)
    if (int c = connect_loopback(port); c >= 0) {
      std::string junk(64 + i, '\0');
      for (size_t k = 0; k < junk.size(); ++k) junk[k] = static_cast<char>((i * 131 + k * 7) & 0xff);
      send_bytes(c, i % 2 ? junk : std::string("GET / HTTP/1.1\r\n\r\n"));
      ::close(c);
    }
  // 4. 30 values of 60 MB under fresh keys: each must be refused from its header.
  int big_refused = 0;
  std::string chunk(1 << 20, 'x');
  for (int i = 0; i < 30; ++i) {
    int c = -1;
    while (c < 0 && Clock::now() < give_up) {  // the store is busy until it drops the idle ones
      c = connect_loopback(port);
      if (c >= 0 && !skip_hello(c)) {
        ::close(c);
        c = -1;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
    if (c < 0) continue;
    std::string key = "big" + std::to_string(i);
    send_bytes(c, set_head(key, 60u << 20));
    send_bytes(c, chunk);  // may fail once the store closes its side
    if (first_byte(c, 60) == 'E') ++big_refused;
    ::close(c);
  }
  std::printf("hostile: %zu idle connections opened, %d refused at once; %d of 30 60-MB values refused\n", idle.size(),
              excess_refused, big_refused);
  // Held until the job is up (the store drops them after its timeout, so the job gets in).
  while (!exists(dir + "/rendezvous") && Clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  for (int c : idle) ::close(c);
  // 5. Fill the store with 512 KiB values under fresh keys until it refuses.
  size_t accepted = 0;
  std::string refusal;
  std::string value(512 << 10, 'v');
  int c = connect_loopback(port);
  if (c >= 0 && skip_hello(c)) {
    for (int i = 0; i < 2000; ++i) {
      std::string key = "fill" + std::to_string(i);
      send_bytes(c, set_head(key, static_cast<uint32_t>(value.size())));
      send_bytes(c, value);
      char r = first_byte(c, 60);
      if (r != 'k') {
        bool closed = false;
        refusal = read_until_closed(c, 60, &closed);
        break;
      }
      accepted += value.size();
    }
  }
  if (c >= 0) ::close(c);
  std::printf("hostile: the store took %zu MiB of values, then: %s\n", accepted >> 20,
              refusal.size() > 4 ? refusal.substr(4).c_str() : "(nothing)");
  touch(dir + "/attack-done");
  bool ok = excess_refused >= 600 - 512 && big_refused == 30 && accepted < (100u << 20) &&
            refusal.find("the store is full") != std::string::npos;
  if (!ok)
    std::printf("FAIL: hostile: the store should refuse clients over its limit, every 60 MB value, and a fill\n");
  return ok ? 0 : 1;
}

int train_under_attack() {
  const std::string dir = attack_dir();
  const long rss_start_kb = status_kb("VmRSS:");
  std::atomic<bool> stop{false};
  std::atomic<size_t> max_fds{0};
  std::thread watch([&] {
    while (!stop) {
      max_fds = std::max(max_fds.load(), open_fds());
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  auto pg = dist::ProcessGroup::init({.timeout_s = 180});
  if (pg->rank() == 0) touch(dir + "/rendezvous");
  const int w = pg->world_size(), r = pg->rank();
  auto until = Clock::now() + std::chrono::seconds(200);
  int steps = 0, wrong = 0;
  for (;;) {
    hg::Tensor t = hg::full({1000}, r + 1.0, hg::TensorOptions(hg::kFloat32));
    pg->all_reduce(t, dist::ReduceOp::Sum).wait();
    if (t.to_vector<float>()[999] != w * (w + 1) / 2.0f) ++wrong;
    ++steps;
    // Rank 0 decides when to stop, for every rank: the attack is over (or took too long).
    bool done = r == 0 && (exists(dir + "/attack-done") || Clock::now() > until);
    hg::Tensor flag = hg::full({1}, done ? 1.0 : 0.0, hg::TensorOptions(hg::kFloat32));
    pg->all_reduce(flag, dist::ReduceOp::Max).wait();
    if (flag.item<float>() != 0) break;
  }
  stop = true;
  watch.join();
  const long hwm_kb = status_kb("VmHWM:");
  std::printf(
      "rank %d: %d all-reduce steps (%d wrong), at most %zu descriptors open, peak RSS %ld MiB (%ld at start)\n", r,
      steps, wrong, max_fds.load(), hwm_kb >> 10, rss_start_kb >> 10);
  bool ok = wrong == 0 && steps > 0;
  if (r == 0) {
    // The store's limits for 2 ranks: 512 clients, 64 MiB (+ 2 KiB) of keys and values.
    ok = ok && max_fds.load() < 512 + 64 && hwm_kb - rss_start_kb < (64 + 192) * 1024;
    if (!ok) std::printf("FAIL: rank 0's descriptors or memory were not bounded\n");
  }
  return ok ? 0 : 1;
}
