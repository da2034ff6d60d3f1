// A small key-value store over TCP for the rendezvous of processes started without mpirun
// (torchrun-style RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT): rank 0 serves it on MASTER_PORT,
// every rank (rank 0 too) is a client. Keys are written once and read by anyone; a read waits
// until its key is set or the timeout passes. The Gloo backend exchanges its addresses through it.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace hg::distributed {

class TcpStore {
 public:
  // is_server: this process listens on port (every interface) before connecting to host:port.
  // Connecting retries until timeout_s (rank 0 may start last); then "[distributed] store: ..." errors.
  TcpStore(const std::string& host, int port, bool is_server, double timeout_s);
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

 private:
  struct Server;
  std::unique_ptr<Server> server_;
  int fd_ = -1;
  std::string where_;  // "host:port" for messages
  double timeout_s_;
};

}  // namespace hg::distributed
