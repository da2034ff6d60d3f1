// Elementwise outputs large enough to be written with streaming stores (kernels/cpu/stream_store.h)
// hold exactly what the cached-store path writes for the same elements.
#include "helpers.h"
#include "kernels/cpu/stream_store.h"

using namespace hg;

namespace {

// op(x) on the whole tensor (streamed: every output here is above 8 MiB) against op on pieces
// small enough to take the plain-store path, joined; compared bit for bit.
template <class F>
void check_streamed_matches_pieces(const Tensor& x, const Tensor& y, F op) {
  const Tensor whole = op(x, y);
  TensorList pieces;
  const int64_t n = x.numel(), piece = 100'003;  // odd, so pieces start at every alignment
  for (int64_t i = 0; i < n; i += piece) {
    const int64_t m = std::min(piece, n - i);
    pieces.push_back(op(x.narrow(0, i, m), y.narrow(0, i, m)));
  }
  const Tensor joined = cat(pieces);
  REQUIRE(whole.shape() == joined.shape());
  REQUIRE(whole.dtype() == joined.dtype());
  const auto a = whole.to(kFloat64).to_vector<double>(), b = joined.to(kFloat64).to_vector<double>();
  int64_t mismatches = 0;
  for (size_t i = 0; i < a.size(); ++i) mismatches += a[i] != b[i] ? 1 : 0;
  CHECK(mismatches == 0);
}

}  // namespace

TEST_CASE("outputs written with streaming stores equal the plain-store results") {
  manual_seed(7);
  // Enough elements that even the unary bool-free case (16-bit in, 16-bit out) streams on this
  // machine's last-level cache, plus 11, from offset 3 so every output starts unaligned.
  const int64_t n = std::max<int64_t>(9'000'000, cpu::last_level_cache_bytes() / 4) + 11;
  const Tensor base_x = randn({n + 3}), base_y = randn({n + 3}) + 0.5;
  for (Dtype d : {kFloat32, kBFloat16, kFloat16}) {
    CAPTURE(dtype_name(d));
    const Tensor x = base_x.to(d).narrow(0, 3, n), y = base_y.to(d).narrow(0, 3, n);
    REQUIRE(cpu::use_stream_stores(x, {&x}));  // the smallest case below takes the streaming path
    check_streamed_matches_pieces(x, y, [](const Tensor& a, const Tensor& b) { return a * b; });
    check_streamed_matches_pieces(x, y, [](const Tensor& a, const Tensor& b) { return a + b * 2.0; });
    check_streamed_matches_pieces(x, y, [](const Tensor& a, const Tensor& b) { return sub(a, b); });
    check_streamed_matches_pieces(x, y, [](const Tensor& a, const Tensor& b) { return add(a, b, 0.75); });
    check_streamed_matches_pieces(x, y, [](const Tensor& a, const Tensor&) { return -a; });
    check_streamed_matches_pieces(x, y, [](const Tensor& a, const Tensor&) { return a.relu(); });
    check_streamed_matches_pieces(x, y, [](const Tensor& a, const Tensor&) { return a.exp(); });  // plain stores
    check_streamed_matches_pieces(x, y, [](const Tensor& a, const Tensor& b) { return lt(a, b); });
  }
  // A contiguous input and output at the start of their blocks, and an in-place update.
  Tensor z = base_x.clone(), z_ref = base_x.clone();
  z.mul_(base_y);
  for (int64_t i = 0; i < z_ref.numel(); i += 100'003) {
    const int64_t m = std::min<int64_t>(100'003, z_ref.numel() - i);
    z_ref.narrow(0, i, m).mul_(base_y.narrow(0, i, m));
  }
  const auto got = z.to_vector<float>(), want = z_ref.to_vector<float>();
  CHECK(got == want);
}
