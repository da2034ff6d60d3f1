// The rendezvous store's wire format, its limits, and the server's request parser: fed raw bytes,
// no sockets, so tests and the fuzzer (tests/fuzz/fuzz_store.cpp) drive it directly.
//
// On connect the server sends a hello: 'H', version, flags (bit 0: a token is required), a 32-byte
// nonce; or 'E' + message and closes (too many clients). With a token the client answers
// 'A' + its own 32-byte nonce + HMAC-SHA-256(token, "hg-store client" + both nonces) and the server
// replies 'K' + HMAC(token, "hg-store server" + both nonces), so each side proves it knows the
// token without sending it. Then requests, one at a time:
//   'S' u32 key length, key, u32 value length, value  ->  'k'
//   'G' u32 key length, key                           ->  'V' u32 value length, value (once set)
// Integers are little-endian. Any refusal is 'E' u32 length, message, and the server closes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "distributed/sha256.h"

namespace hg::distributed {

inline constexpr uint8_t kStoreVersion = 1;
inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kHelloBytes = 3 + kNonceBytes;

struct StoreLimits {
  size_t max_key_bytes = 4096;
  size_t max_value_bytes = size_t{1} << 20;
  size_t max_total_bytes = size_t{64} << 20;  // keys and values stored, plus sets being received
  size_t max_keys = 16384;
  int max_clients = 512;  // connections open at once; more are refused at once
  // A connection must authenticate and send its first request, a started request must arrive
  // and a reply must drain within this; a client that completed a request may then idle.
  double io_timeout_s = 30;
};

// Limits that fit a job of world_size ranks: Gloo's full mesh stores one address per pair per
// rank (about 150 bytes), so a value grows with the world and the total with its square.
StoreLimits store_limits_for_world(int world_size);

// The bytes a set may still claim: shared by a server's parsers, so half-received values count.
struct ByteBudget {
  size_t limit = 0;
  size_t used = 0;
  bool reserve(size_t n) {
    if (n > limit - used) return false;
    used += n;
    return true;
  }
  void release(size_t n) { used -= n; }
};

struct StoreRequest {
  char kind = 0;  // 'A' (authenticate), 'S' or 'G'
  std::string key;
  std::vector<char> value;
  uint8_t client_nonce[kNonceBytes] = {};
  uint8_t mac[32] = {};
};

class RequestParser {
 public:
  enum class Status { NeedMore, Done, Refused };
  // expect_auth: the first request must be 'A' and no other may be; without it 'A' is unknown.
  RequestParser(const StoreLimits& limits, ByteBudget& budget, bool expect_auth);
  ~RequestParser();
  RequestParser(const RequestParser&) = delete;
  RequestParser& operator=(const RequestParser&) = delete;

  // Consumes bytes from [*p, end) up to the end of one request. Done: request() holds it, and
  // for 'S' the budget keeps its bytes (take_reserved() hands them over). Refused: error() says why.
  Status feed(const char** p, const char* end);
  StoreRequest& request() { return req_; }
  const std::string& error() const { return error_; }
  // A request is partly received (the server's timeout on slow clients applies).
  bool in_progress() const { return stage_ != Stage::Kind; }
  // After Done: hands the reserved bytes of a set to the caller (who now owns releasing them).
  size_t take_reserved();
  // Starts the next request; forgets a finished one and releases any bytes not taken.
  void reset();

 private:
  enum class Stage { Kind, KeyLength, Key, ValueLength, Value, Auth };
  Status refuse(std::string why);
  bool read_u32(const char** p, const char* end, uint32_t* out);

  const StoreLimits& limits_;
  ByteBudget& budget_;
  bool expect_auth_;
  Stage stage_ = Stage::Kind;
  StoreRequest req_;
  char num_[4] = {};
  size_t have_ = 0;  // bytes of the current field received
  size_t want_ = 0;  // its length
  size_t reserved_ = 0;
  std::string error_;
};

// Reply and request encoders, shared by the server and the client.
void put_u32(std::vector<char>& out, uint32_t v);
uint32_t get_u32(const char* p);
std::vector<char> encode_error(std::string_view message);
std::vector<char> encode_set(std::string_view key, const std::vector<char>& value);
std::vector<char> encode_get(std::string_view key);
Digest client_proof(std::string_view token, const uint8_t* server_nonce, const uint8_t* client_nonce);
Digest server_proof(std::string_view token, const uint8_t* server_nonce, const uint8_t* client_nonce);
// n bytes from the kernel's random source (getrandom).
void random_bytes(uint8_t* out, size_t n);

}  // namespace hg::distributed
