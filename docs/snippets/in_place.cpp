// In-place ops under autograd: recorded like PyTorch's, on tensors and on views of them.
#include <halfgrad.h>

int main() {
  hg::Tensor x = hg::tensor(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3}).requires_grad_();
  hg::Tensor y = x * 1.0;     // a non-leaf: in-place ops on it are recorded
  y.narrow(1, 0, 2).mul_(2);  // through a view: y's history is rewritten (PyTorch's CopySlices)
  y += x;                     // operators +=, -=, *=, /= are add_, sub_, mul_, div_
  y.relu_();
  y.sum().backward();
  HG_CHECK(x.grad().to_vector<double>() == std::vector<double>({3, 3, 2, 3, 3, 2}), "guide", "d/dx");

  // A leaf that requires grad cannot be written in place outside NoGradGuard (as in PyTorch).
  bool refused = false;
  try {
    x.add_(1.0);
  } catch (const hg::Error& e) {
    refused = std::string(e.what()).find("[add_] a leaf tensor that requires grad") != std::string::npos;
  }
  HG_CHECK(refused, "guide", "in-place on a leaf is refused");
  {
    hg::NoGradGuard no_grad;  // how optimizers update their parameters
    x.add_(1.0);
  }
  // A tensor saved for backward and then written is caught when backward needs it.
  hg::Tensor z = x * 1.0;
  hg::Tensor loss = (z * z).sum();  // mul saved z
  z.mul_(3.0);
  refused = false;
  try {
    loss.backward();
  } catch (const hg::Error& e) {
    refused = std::string(e.what()).find("modified in place") != std::string::npos;
  }
  HG_CHECK(refused, "guide", "the version check");
}
