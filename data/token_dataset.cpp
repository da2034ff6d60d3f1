#include "data/token_dataset.h"

#include "framework/error.h"
#include "framework/ops/creation.h"

namespace hg::data {

namespace {

constexpr std::string_view kTokenDatasetOp = "TokenDataset";

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// A permutation of [0, n) keyed by `key`, computed one index at a time: a 4-round Feistel network
// over the smallest even power of two >= n, cycle-walked back into range. No table, so an epoch
// of a billion windows costs no memory and a resumed run needs only (epoch, step).
class Permutation {
 public:
  Permutation(uint64_t n, uint64_t key) : n_(n), key_(key) {
    while ((uint64_t{1} << (2 * half_bits_)) < n) ++half_bits_;
    mask_ = (uint64_t{1} << half_bits_) - 1;
  }
  uint64_t operator()(uint64_t x) const {
    do x = round_trip(x);
    while (x >= n_);
    return x;
  }

 private:
  uint64_t round_trip(uint64_t x) const {
    uint64_t left = x >> half_bits_, right = x & mask_;
    for (uint64_t r = 0; r < 4; ++r) {
      const uint64_t f = splitmix64(key_ ^ (r << 58) ^ right) & mask_;
      const uint64_t next_right = left ^ f;
      left = right;
      right = next_right;
    }
    return (left << half_bits_) | right;
  }
  uint64_t n_, key_, mask_ = 0;
  int half_bits_ = 1;
};

}  // namespace

TokenDataset::TokenDataset(const std::string& path, TokenDatasetOptions options, int32_t vocab_size)
    : TokenDataset(TokenFile(path, vocab_size), 0, 0, 0, options, path) {}

TokenDataset TokenDataset::synthetic(int64_t num_tokens, int32_t vocab_size, uint64_t token_seed,
                                     TokenDatasetOptions options) {
  HG_CHECK(vocab_size >= 1, kTokenDatasetOp, "synthetic: vocabulary size {} must be positive", vocab_size);
  HG_CHECK(num_tokens >= 0, kTokenDatasetOp, "synthetic: negative token count {}", num_tokens);
  return TokenDataset(std::nullopt, num_tokens, vocab_size, token_seed, options, "synthetic");
}

TokenDataset::TokenDataset(std::optional<TokenFile> file, int64_t num_tokens, int32_t vocab_size, uint64_t token_seed,
                           TokenDatasetOptions options, std::string name)
    : file_(std::move(file)),
      num_tokens_(file_ ? file_->size() : num_tokens),
      vocab_size_(file_ ? file_->vocab_size() : vocab_size),
      token_seed_(token_seed),
      options_(options),
      name_(std::move(name)) {
  const auto& o = options_;
  HG_CHECK(o.batch_size >= 1 && o.seq_len >= 1, kTokenDatasetOp, "{}: batch_size {} and seq_len {} must be positive",
           name_, o.batch_size, o.seq_len);
  HG_CHECK(o.world_size >= 1 && o.rank >= 0 && o.rank < o.world_size, kTokenDatasetOp,
           "{}: rank {} is not in 0..world_size-1 (world_size {})", name_, o.rank, o.world_size);
  HG_CHECK(o.seq_len < num_tokens_, kTokenDatasetOp,
           "{}: a window of seq_len + 1 = {} tokens is larger than the {} tokens there", name_, o.seq_len + 1,
           num_tokens_);
  num_windows_ = (num_tokens_ - 1) / o.seq_len;
  HG_CHECK(o.batch_size <= num_windows_ / o.world_size, kTokenDatasetOp,
           "{}: {} tokens make {} windows of {} tokens, fewer than one step needs (batch_size {} x world_size {})",
           name_, num_tokens_, num_windows_, o.seq_len + 1, o.batch_size, o.world_size);
  steps_per_epoch_ = num_windows_ / (o.batch_size * o.world_size);
}

int64_t TokenDataset::token(int64_t pos) const {
  if (file_) return file_->data()[pos];
  return static_cast<int64_t>(splitmix64(token_seed_ * 0xD1B54A32D192ED03ull ^ static_cast<uint64_t>(pos)) %
                              static_cast<uint64_t>(vocab_size_));
}

int64_t TokenDataset::window_start(TokenDatasetState at, int64_t row) const {
  HG_CHECK(row >= 0 && row < options_.batch_size, kTokenDatasetOp, "{}: row {} is not in 0..{}", name_, row,
           options_.batch_size - 1);
  // The step's B * world_size window slots, this rank's B of them, then the epoch's permutation.
  const int64_t slot = (at.step * options_.world_size + options_.rank) * options_.batch_size + row;
  int64_t window = slot;
  if (options_.shuffle) {
    const uint64_t key = splitmix64(options_.seed ^ splitmix64(static_cast<uint64_t>(at.epoch)));
    window = static_cast<int64_t>(Permutation(static_cast<uint64_t>(num_windows_), key)(static_cast<uint64_t>(slot)));
  }
  return window * options_.seq_len;
}

TokenBatch TokenDataset::batch(TokenDatasetState at) const {
  HG_CHECK(at.epoch >= 0 && at.step >= 0 && at.step < steps_per_epoch_, kTokenDatasetOp,
           "{}: state (epoch {}, step {}) is outside the {} steps of an epoch", name_, at.epoch, at.step,
           steps_per_epoch_);
  const int64_t b = options_.batch_size, t = options_.seq_len;
  Tensor inputs = empty({b, t}, kInt64);
  Tensor targets = empty({b, t}, kInt64);
  auto* x = inputs.data_ptr<int64_t>();
  auto* y = targets.data_ptr<int64_t>();
  for (int64_t row = 0; row < b; ++row) {
    const int64_t start = window_start(at, row);
    int64_t prev = token(start);
    for (int64_t i = 0; i < t; ++i) {
      const int64_t cur = token(start + i + 1);
      x[row * t + i] = prev;
      y[row * t + i] = cur;
      prev = cur;
    }
  }
  return {inputs, targets};
}

TokenBatch TokenDataset::next() {
  TokenBatch out = batch(state_);
  if (++state_.step == steps_per_epoch_) state_ = {state_.epoch + 1, 0};
  return out;
}

void TokenDataset::set_state(TokenDatasetState state) {
  HG_CHECK(state.epoch >= 0 && state.step >= 0 && state.step < steps_per_epoch_, kTokenDatasetOp,
           "{}: cannot resume at (epoch {}, step {}): an epoch has {} steps", name_, state.epoch, state.step,
           steps_per_epoch_);
  state_ = state;
}

}  // namespace hg::data
