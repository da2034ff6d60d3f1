// Tensors: creation, dtypes, views, arithmetic, reading values back.
#include <halfgrad.h>

int main() {
  hg::manual_seed(0);
  hg::Tensor a = hg::ones({2, 3});                  // float32 by default, on the CPU
  hg::Tensor b = hg::arange(6.0).reshape({2, 3});   // torch.arange(6.).reshape(2, 3)
  hg::Tensor c = hg::randn({3, 4}, hg::kBFloat16);  // TensorOptions: dtype, device
  hg::Tensor d = hg::tensor(std::vector<float>{1, 2, 3, 4}, {2, 2});

  hg::Tensor e = a * 2.0 + b;                        // broadcasting operators as in PyTorch
  hg::Tensor f = hg::matmul(e, c.to(hg::kFloat32));  // [2, 3] @ [3, 4]
  hg::Tensor g = b.t();                              // a view: shares b's storage
  HG_CHECK(!g.is_contiguous() && g.shape() == hg::Shape({3, 2}), "guide", "t() is a strided view");
  hg::Tensor row = b.select(0, 1);  // b[1]
  row.add_(1.0);                    // in place: b changes too

  HG_CHECK(b.to_vector<float>()[3] == 4.0f, "guide", "b[1][0] was 3, plus 1");
  HG_CHECK(f.shape() == hg::Shape({2, 4}), "guide", "matmul shape");
  HG_CHECK(d.sum().item<float>() == 10.0f, "guide", "sum");
  HG_CHECK(hg::argmax(d, 1).to_vector<int64_t>() == std::vector<int64_t>({1, 1}), "guide", "argmax");
  fmt::print("e = {}\n", e.to_vector<float>());
}
