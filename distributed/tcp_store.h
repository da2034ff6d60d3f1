// A small key-value store over TCP for the rendezvous of processes started without mpirun
// (torchrun-style RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT): rank 0 serves it on MASTER_PORT
// (StoreServer), every rank (rank 0 too) is a client. A read waits until its key is set or the
// timeout passes. The Gloo backend exchanges its addresses through it. Exposure, limits and the
// token: docs/DISTRIBUTED.md, "The rendezvous store".
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "distributed/store_protocol.h"

namespace hg::distributed {

class StoreServer;

struct TcpStoreOptions {
  std::string token;      // HG_DIST_TOKEN: clients must prove they know it (empty: no check)
  bool bind_all = false;  // HG_DIST_BIND_ALL=1: listen on every interface, not only MASTER_ADDR's
  StoreLimits limits;
  // From the environment, with limits sized for world_size ranks.
  static TcpStoreOptions from_env(int world_size);
};

class TcpStore {
 public:
  // is_server: this process listens on host:port (port 0: a free one, see port()) before
  // connecting to it. Connecting retries until timeout_s (rank 0 may start last, or be busy); a
  // name that cannot exist, a token mismatch or a refusal fail at once with "[distributed] store: ...".
  TcpStore(const std::string& host, int port, bool is_server, double timeout_s, TcpStoreOptions options = {});
  ~TcpStore();
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  void set(const std::string& key, const std::vector<char>& value);
  // Waits until key is set (by any client), at most timeout_s.
  std::vector<char> get(const std::string& key);
  void set_timeout(double seconds) { timeout_s_ = seconds; }
  // The local address of the connection to the store: the interface that reaches MASTER_ADDR,
  // which is the one the other ranks can reach this process on.
  std::string local_address() const;
  int port() const { return port_; }
  const StoreServer* server() const { return server_.get(); }

 private:
  enum class Handshake { Ok, Retry };
  Handshake handshake(int fd, std::chrono::steady_clock::time_point deadline, std::string* why);
  [[noreturn]] void refused(const std::string& what);

  std::unique_ptr<StoreServer> server_;
  int fd_ = -1;
  int port_;
  std::string where_;  // "host:port" for messages
  std::string token_;
  double timeout_s_;
};

}  // namespace hg::distributed
