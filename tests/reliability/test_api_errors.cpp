// Hostile calls into the public API: each must throw hg::Error naming the call, never another
// std::exception (std::length_error, std::bad_alloc, std::out_of_range, std::system_error, ...)
// and never succeed quietly.
#include <doctest/doctest.h>

#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "tests/cpu/helpers.h"

using namespace hg;

namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

struct HostileCall {
  const char* what;
  const char* op;  // the "[op]" prefix the message must start with
  std::function<void()> call;
};

// Fails naming the case when the call returns, or throws anything but an hg::Error with `op`.
void expect_hg_error(const HostileCall& c) {
  CAPTURE(c.what);
  try {
    c.call();
    FAIL_CHECK("no exception");
  } catch (const Error& e) {
    const std::string msg = e.what();
    CHECK_MESSAGE(msg.rfind(fmt::format("[{}]", c.op), 0) == 0, "message: " << msg);
  } catch (const std::exception& e) {
    FAIL_CHECK("a std:: exception escaped: " << e.what());
  }
}

class SizedDataset : public data::Dataset {
 public:
  explicit SizedDataset(int64_t n) : n_(n) {}
  int64_t size() const override { return n_; }
  data::Sample get(int64_t) const override { return {zeros({1})}; }

 private:
  int64_t n_;
};

data::DataLoader loader_of(int64_t n, bool shuffle = false) {
  data::DataLoaderOptions o;
  o.batch_size = 2;
  o.shuffle = shuffle;
  return data::DataLoader(std::make_shared<SizedDataset>(n), o);
}

}  // namespace

TEST_CASE("api errors: hostile calls throw hg::Error naming the op, nothing else escapes") {
  Tensor x = arange(0.0, 4.0, 1.0, kFloat32);
  Tensor m = arange(0.0, 16.0, 1.0, kFloat32).reshape({4, 4});
  const std::vector<HostileCall> calls = {
      {"narrow past the end by overflow", "narrow", [&] { x.narrow(0, kMax, 2); }},
      {"narrow with a huge length", "narrow", [&] { x.narrow(0, 1, kMax); }},
      {"select at INT64_MIN", "select", [&] { x.select(0, kMin); }},
      {"view whose product overflows", "view",
       [&] {
         x.view({kMax, 4, -1});
       }},
      {"reshape whose product overflows", "reshape",
       [&] {
         x.reshape({kMax, kMax, 0});
       }},
      {"expand to an overflowing shape", "expand",
       [&] {
         x.narrow(0, 0, 1).expand({kMax, kMax});
       }},
      {"expand to a negative size", "expand", [&] { x.narrow(0, 0, 1).expand({-3}); }},
      {"as_strided past the storage", "as_strided", [&] { as_strided(x, {2}, {kMax}, 0); }},
      {"as_strided at a negative offset", "as_strided", [&] { as_strided(x, {0}, {1}, -1); }},
      {"unsqueeze at INT64_MAX", "unsqueeze", [&] { x.unsqueeze(kMax); }},
      {"transpose at INT64_MIN", "transpose", [&] { m.transpose(kMin, 0); }},
      {"permute with a huge dim", "permute",
       [&] {
         m.permute({kMax, 0});
       }},
      {"split sizes that overflow", "split",
       [&] {
         x.split(std::vector<int64_t>{kMax, kMax, 6});
       }},
      {"repeat that overflows", "repeat",
       [&] {
         x.repeat({kMax, 2});
       }},
      {"zeros of an overflowing shape", "zeros",
       [&] {
         zeros({kMax, 4});
       }},
      {"full of a negative shape", "full", [&] { full({-1}, 1.0); }},
      {"add_ into a partially overlapping view", "add_", [&] { x.narrow(0, 1, 3).add_(x.narrow(0, 0, 3)); }},
      {"copy_ into a partially overlapping view", "copy_", [&] { m.copy_(m.t()); }},
      {"fill_ of an expanded view", "fill_", [&] { x.narrow(0, 0, 1).expand({3}).fill_(1.0); }},
      {"Sequential index out of range", "Sequential", [&] { (void)nn::Sequential()[3]; }},
      {"TensorDataset tensor out of range", "TensorDataset", [&] { (void)data::TensorDataset({zeros({2})})[5]; }},
      {"optimizer lr of a missing group", "SGD",
       [&] {
         Tensor p = zeros({2}).requires_grad_();
         (void)optim::SGD({p}, optim::SGDOptions{}).lr(7);
       }},
      {"DataLoader over a dataset of 2^62 samples", "DataLoader",
       [&] {
         auto loader = loader_of(int64_t{1} << 62);
         for (const TensorList& batch : loader) (void)batch;
       }},
      {"DataLoader order of 2^62 samples", "DataLoader", [&] { (void)loader_of(int64_t{1} << 62, true).order(0); }},
      {"DataLoader over a dataset of -5 samples", "DataLoader", [&] { (void)loader_of(-5).size(); }},
      {"DataLoader iterating a dataset of -5 samples", "DataLoader",
       [&] {
         auto loader = loader_of(-5);
         for (const TensorList& batch : loader) (void)batch;
       }},
  };
  for (const HostileCall& c : calls) expect_hg_error(c);
}
