// Indexing as in libtorch, and a few tensor ops: sort/topk, cumsum, tril, multinomial.
#include <halfgrad.h>

using namespace hg::indexing;  // Slice, None, Ellipsis

int main() {
  hg::manual_seed(0);
  hg::Tensor x = hg::arange(0.0, 24.0, 1.0, hg::kFloat32).reshape({2, 3, 4});

  hg::Tensor a = x.index({1, Slice(None, None, 2), None, -1});  // x[1, ::2, None, -1]: a view
  HG_CHECK(a.shape() == hg::Shape({2, 1}) && a.to_vector<float>() == std::vector<float>({15, 23}), "guide", "index");
  hg::Tensor b = x.index({"...", hg::tensor(std::vector<int64_t>{3, 0})});  // x[..., [3, 0]]: a copy
  HG_CHECK(b.shape() == hg::Shape({2, 3, 2}), "guide", "tensor index");
  x.index_put_({0, Slice(1, None)}, 0.0);  // x[0, 1:] = 0
  x.index_put_({x > 20.0}, -1.0);          // x[x > 20] = -1
  // 0+1+2+3 left of x[0], 12..23 in x[1] with 21, 22, 23 now -1: 6 + 210 - 66 - 3.
  HG_CHECK(x.sum().item<float>() == 147.0f, "guide", "index_put_");

  hg::Tensor logits = hg::randn({2, 10});
  auto [top, where] = logits.topk(3);  // values and int64 indices, largest first
  hg::Tensor order = hg::argsort(logits, -1, true);
  HG_CHECK(where.to_vector<int64_t>()[0] == order.to_vector<int64_t>()[0], "guide", "topk agrees with argsort");
  hg::Tensor causal = hg::tril(hg::ones({4, 4}, hg::kBool));      // a causal attention mask
  hg::Tensor running = hg::cumsum(hg::ones({5}), 0);              // 1, 2, 3, 4, 5
  hg::Tensor next = hg::multinomial(hg::softmax(logits, -1), 1);  // one class per row, seeded
  HG_CHECK(running.to_vector<float>().back() == 5.0f && next.shape() == hg::Shape({2, 1}), "guide", "ops");
  fmt::print("top-3 {} at {}; sampled {}\n", top.to_vector<float>(), where.to_vector<int64_t>(),
             next.to_vector<int64_t>());
  (void)causal;
}
