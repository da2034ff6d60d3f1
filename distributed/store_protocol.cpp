// The store's request parser: a state machine over the fields of one request, checking each
// length against the limits as soon as it is known, so an oversized or malformed request is
// refused before its bytes are buffered.
#include "distributed/store_protocol.h"

#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "framework/error.h"

namespace hg::distributed {

StoreLimits store_limits_for_world(int world_size) {
  StoreLimits l;
  size_t w = static_cast<size_t>(std::max(world_size, 1));
  l.max_value_bytes += w * 1024;
  l.max_total_bytes += w * w * 512;
  l.max_keys += 4 * w;
  l.max_clients = static_cast<int>(std::max<size_t>(l.max_clients, 2 * w + 64));
  return l;
}

RequestParser::RequestParser(const StoreLimits& limits, ByteBudget& budget, bool expect_auth)
    : limits_(limits), budget_(budget), expect_auth_(expect_auth) {}

RequestParser::~RequestParser() { budget_.release(reserved_); }

size_t RequestParser::take_reserved() {
  size_t n = reserved_;
  reserved_ = 0;
  return n;
}

void RequestParser::reset() {
  budget_.release(take_reserved());
  stage_ = Stage::Kind;
  req_.kind = 0;
  req_.key.clear();
  req_.value.clear();
  have_ = want_ = 0;
}

RequestParser::Status RequestParser::refuse(std::string why) {
  error_ = std::move(why);
  return Status::Refused;
}

bool RequestParser::read_u32(const char** p, const char* end, uint32_t* out) {
  while (have_ < 4 && *p < end) num_[have_++] = *(*p)++;
  if (have_ < 4) return false;
  *out = get_u32(num_);
  have_ = 0;
  return true;
}

RequestParser::Status RequestParser::feed(const char** p, const char* end) {
  for (;;) {
    switch (stage_) {
      case Stage::Kind: {
        if (*p == end) return Status::NeedMore;
        char kind = *(*p)++;
        req_.kind = kind;
        if (expect_auth_) {
          if (kind != 'A') return refuse("authenticate first: this store requires HG_DIST_TOKEN");
          expect_auth_ = false;
          stage_ = Stage::Auth;
          have_ = 0;
        } else if (kind == 'S' || kind == 'G') {
          stage_ = Stage::KeyLength;
        } else {
          return refuse(fmt::format("unknown request 0x{:02x}", static_cast<unsigned char>(kind)));
        }
        break;
      }
      case Stage::Auth: {
        size_t take = std::min<size_t>(end - *p, 2 * kNonceBytes - have_);
        for (size_t i = 0; i < take; ++i, ++have_) {
          uint8_t b = static_cast<uint8_t>(*(*p)++);
          if (have_ < kNonceBytes)
            req_.client_nonce[have_] = b;
          else
            req_.mac[have_ - kNonceBytes] = b;
        }
        if (have_ < 2 * kNonceBytes) return Status::NeedMore;
        have_ = 0;
        stage_ = Stage::Kind;
        return Status::Done;
      }
      case Stage::KeyLength: {
        uint32_t n = 0;
        if (!read_u32(p, end, &n)) return Status::NeedMore;
        if (n > limits_.max_key_bytes)
          return refuse(fmt::format("a key of {} bytes exceeds the limit of {}", n, limits_.max_key_bytes));
        if (!budget_.reserve(n)) return refuse("the store is full");
        reserved_ += n;
        want_ = n;
        req_.key.reserve(n);
        stage_ = Stage::Key;
        break;
      }
      case Stage::Key: {
        size_t take = std::min<size_t>(end - *p, want_ - req_.key.size());
        req_.key.append(*p, take);
        *p += take;
        if (req_.key.size() < want_) return Status::NeedMore;
        if (req_.kind == 'G') {
          stage_ = Stage::Kind;
          return Status::Done;
        }
        stage_ = Stage::ValueLength;
        break;
      }
      case Stage::ValueLength: {
        uint32_t n = 0;
        if (!read_u32(p, end, &n)) return Status::NeedMore;
        if (n > limits_.max_value_bytes)
          return refuse(fmt::format("a value of {} bytes exceeds the limit of {}", n, limits_.max_value_bytes));
        if (!budget_.reserve(n))
          return refuse(fmt::format("the store is full: a value of {} bytes would exceed the limit of {} bytes", n,
                                    budget_.limit));
        reserved_ += n;
        want_ = n;
        req_.value.reserve(n);
        stage_ = Stage::Value;
        break;
      }
      case Stage::Value: {
        size_t take = std::min<size_t>(end - *p, want_ - req_.value.size());
        req_.value.insert(req_.value.end(), *p, *p + take);
        *p += take;
        if (req_.value.size() < want_) return Status::NeedMore;
        stage_ = Stage::Kind;
        return Status::Done;
      }
    }
  }
}

void put_u32(std::vector<char>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint32_t get_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

std::vector<char> encode_error(std::string_view message) {
  std::vector<char> out{'E'};
  put_u32(out, static_cast<uint32_t>(message.size()));
  out.insert(out.end(), message.begin(), message.end());
  return out;
}

std::vector<char> encode_set(std::string_view key, const std::vector<char>& value) {
  std::vector<char> out{'S'};
  put_u32(out, static_cast<uint32_t>(key.size()));
  out.insert(out.end(), key.begin(), key.end());
  put_u32(out, static_cast<uint32_t>(value.size()));
  out.insert(out.end(), value.begin(), value.end());
  return out;
}

std::vector<char> encode_get(std::string_view key) {
  std::vector<char> out{'G'};
  put_u32(out, static_cast<uint32_t>(key.size()));
  out.insert(out.end(), key.begin(), key.end());
  return out;
}

namespace {

Digest proof(std::string_view label, std::string_view token, const uint8_t* server_nonce, const uint8_t* client_nonce) {
  std::string msg(label);
  msg.append(reinterpret_cast<const char*>(server_nonce), kNonceBytes);
  msg.append(reinterpret_cast<const char*>(client_nonce), kNonceBytes);
  return hmac_sha256(token, msg);
}

}  // namespace

Digest client_proof(std::string_view token, const uint8_t* server_nonce, const uint8_t* client_nonce) {
  return proof("hg-store client", token, server_nonce, client_nonce);
}

Digest server_proof(std::string_view token, const uint8_t* server_nonce, const uint8_t* client_nonce) {
  return proof("hg-store server", token, server_nonce, client_nonce);
}

void random_bytes(uint8_t* out, size_t n) {
  while (n > 0) {
    ssize_t got = ::getrandom(out, n, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      fail("distributed", "store: getrandom() failed: {}", std::strerror(errno));
    }
    out += got;
    n -= static_cast<size_t>(got);
  }
}

}  // namespace hg::distributed
