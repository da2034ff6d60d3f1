// Mixed precision: autocast regions, a GradScaler, and the op recorder to see what ran in which dtype.
#include <halfgrad.h>

int main() {
  hg::manual_seed(0);
  hg::nn::Linear model(16, 4);  // float32 parameters
  hg::optim::SGD opt(model.parameters(), {.lr = 0.01});
  hg::amp::GradScaler scaler(hg::kCPU);  // needed for float16; harmless for bfloat16
  const hg::Tensor x = hg::randn({8, 16});
  const hg::Tensor y = hg::randint(0, 4, {8});

  hg::OpRecorder recorder;  // lists every op run on this thread while it lives
  opt.zero_grad();
  hg::Tensor logits, loss;
  {
    hg::amp::AutocastGuard autocast(hg::kCPU, hg::kBFloat16);  // torch.autocast("cpu", torch.bfloat16)
    logits = model(x);                                         // linear: lower precision
    loss = hg::cross_entropy(logits, y);                       // losses: float32
  }
  scaler.scale(loss).backward();  // backward replays each op's autocast state by itself
  scaler.step(opt);               // skipped if a gradient held inf or NaN
  scaler.update();

  HG_CHECK(logits.dtype() == hg::kBFloat16 && loss.dtype() == hg::kFloat32, "guide", "autocast dtypes");
  HG_CHECK(model.weight.grad().dtype() == hg::kFloat32, "guide", "gradients arrive in the weight's dtype");
  for (const hg::OpEvent& e : recorder.events())  // also lists the casts ("to") and internal ops
    if (e.name == "linear" || e.name == "cross_entropy") fmt::print("{} ran in {}\n", e.name, e.outputs[0]);
}
