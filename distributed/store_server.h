// The rendezvous store's server (rank 0): one thread runs a poll() loop over every connection, so
// a client costs a descriptor and a few buffers, never a thread, and is gone as soon as it goes.
// Limits (StoreLimits) bound the clients, the keys and the bytes; a bad request drops its client.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <sys/socket.h>

#include "distributed/store_protocol.h"

namespace hg::distributed {

class StoreServer {
 public:
  struct Stats {
    size_t clients = 0, keys = 0, bytes = 0;  // now
    uint64_t accepted = 0, refused = 0;       // connections; refused: over max_clients or no descriptor left
    uint64_t dropped = 0;                     // clients dropped for a bad request, a wrong token or a timeout
    uint64_t accept_failures = 0;             // accept() out of descriptors (EMFILE, ENFILE)
    uint64_t wakeups = 0;                     // turns of the poll loop: stays small unless something spins
  };

  // Listens on port (0: any free one) on each address host resolves to, or on every interface
  // when bind_all. token: what clients must prove they know (empty: nothing).
  StoreServer(const std::string& host, int port, bool bind_all, std::string token, StoreLimits limits,
              double resolve_timeout_s);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  int port() const { return port_; }
  const std::vector<std::string>& addresses() const { return addresses_; }  // "127.0.0.1", "::1"
  Stats stats() const;

 private:
  struct Loop;
  // 0, or the errno with *error saying what failed.
  int listen_on(const sockaddr* addr, socklen_t len, std::string* error);

  std::vector<int> listen_fds_;
  std::vector<std::string> addresses_;
  int port_ = 0;
  int wake_[2] = {-1, -1};
  std::unique_ptr<Loop> loop_;
  std::thread thread_;
};

}  // namespace hg::distributed
