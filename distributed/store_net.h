// Socket helpers shared by the store's server and client: name resolution that tells a
// permanent failure (no such host) from a transient one, and reads and writes with deadlines.
#pragma once

#include <netdb.h>

#include <chrono>
#include <memory>
#include <string>

namespace hg::distributed {

using StoreClock = std::chrono::steady_clock;

StoreClock::time_point deadline_after(double seconds);

// Whether getaddrinfo's error can go away by itself (a DNS server not answering yet) or never
// will (no such name): the latter fails at once instead of after the whole timeout.
bool resolution_error_is_permanent(int gai_error);

using AddrList = std::unique_ptr<addrinfo, void (*)(addrinfo*)>;
// Resolves host:port (TCP), retrying transient errors until deadline; throws hg::Error naming
// what ("MASTER_ADDR") on a permanent error or at the deadline.
AddrList resolve(const std::string& host, int port, StoreClock::time_point deadline, bool passive = false);

// Blocking-socket I/O with a deadline; false on a closed connection, an error or the deadline.
bool recv_all(int fd, void* data, size_t n, StoreClock::time_point deadline);
bool send_all(int fd, const void* data, size_t n);

std::string address_text(const sockaddr* addr);

}  // namespace hg::distributed
