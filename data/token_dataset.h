// Language-model batches from a token file (or synthetic tokens): [B, T] inputs and the [B, T]
// targets one token later, cut from windows of T + 1 tokens, shuffled per epoch from a seed,
// split across ranks, and resumable from a small state.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "data/token_file.h"
#include "framework/tensor.h"

namespace hg::data {

struct TokenDatasetOptions {
  int64_t batch_size = 8;  // B, per rank
  int64_t seq_len = 1024;  // T
  // true: each epoch visits the windows in a permutation drawn from (seed, epoch); false: in
  // file order (an evaluation pass).
  bool shuffle = true;
  uint64_t seed = 0;
  // Rank r of world_size takes its own B windows of each step's B * world_size: disjoint.
  int rank = 0;
  int world_size = 1;
};

// Where the dataset stands: the next batch is step `step` of epoch `epoch`. Save it with a
// checkpoint and hand it to set_state() to resume with the same batches.
struct TokenDatasetState {
  int64_t epoch = 0;
  int64_t step = 0;
  bool operator==(const TokenDatasetState&) const = default;
};

struct TokenBatch {
  Tensor inputs;   // int64 [B, T]: tokens w .. w+T-1 of each window
  Tensor targets;  // int64 [B, T]: tokens w+1 .. w+T
};

class TokenDataset {
 public:
  // The token file at `path` (checked as TokenFile checks it, `vocab_size` as there). The file is
  // cut into floor((N - 1) / T) windows starting at multiples of T, so consecutive windows share
  // one token and an epoch sees each token once. Throws "[TokenDataset] <path>: ..." when the
  // options are invalid or the file holds fewer windows than one step needs.
  TokenDataset(const std::string& path, TokenDatasetOptions options, int32_t vocab_size = 0);
  // Random tokens in [0, vocab_size), a pure function of (token_seed, position): a `num_tokens`
  // long corpus that needs no file or memory, for speed runs.
  static TokenDataset synthetic(int64_t num_tokens, int32_t vocab_size, uint64_t token_seed,
                                TokenDatasetOptions options);

  // The batch at the current state, then moves to the next step (the next epoch after the last).
  TokenBatch next();
  // The batch at `at`, without moving.
  TokenBatch batch(TokenDatasetState at) const;

  TokenDatasetState state() const { return state_; }
  // Throws when the state is not one this dataset can reach (negative, step past the epoch).
  void set_state(TokenDatasetState state);

  int64_t num_tokens() const { return num_tokens_; }
  int32_t vocab_size() const { return vocab_size_; }
  int64_t num_windows() const { return num_windows_; }
  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  const TokenDatasetOptions& options() const { return options_; }
  // The first token of the window that row `row` of the batch at `at` holds.
  int64_t window_start(TokenDatasetState at, int64_t row) const;

 private:
  TokenDataset(std::optional<TokenFile> file, int64_t num_tokens, int32_t vocab_size, uint64_t token_seed,
               TokenDatasetOptions options, std::string name);
  int64_t token(int64_t pos) const;

  std::optional<TokenFile> file_;
  int64_t num_tokens_;
  int32_t vocab_size_;
  uint64_t token_seed_;
  TokenDatasetOptions options_;
  std::string name_;
  int64_t num_windows_ = 0;
  int64_t steps_per_epoch_ = 0;
  TokenDatasetState state_;
};

}  // namespace hg::data
