// A dataset of your own, transforms, and a DataLoader whose worker threads prepare batches ahead.
#include <halfgrad.h>

// Sample i: a [2, 3] "image" whose two channels hold i and 2i, and the label i % 3. get() may run
// on several worker threads at once: it only reads.
class Synthetic : public hg::data::Dataset {
 public:
  int64_t size() const override { return 10; }
  hg::data::Sample get(int64_t i) const override {
    hg::Tensor image = hg::cat({hg::full({1, 3}, static_cast<double>(i)), hg::full({1, 3}, 2.0 * i)}, 0);
    return {image, hg::scalar_tensor(static_cast<double>(i % 3), hg::kInt64)};
  }
};

int main() {
  // Transforms map a sample to a sample; Compose chains them, map() applies them on access.
  auto dataset = hg::data::map(std::make_shared<Synthetic>(),
                               hg::data::Compose{
                                   hg::data::Normalize({4.5, 9.0}, {3.0, 6.0}),  // per channel, field 0
                                   hg::data::Lambda([](const hg::Tensor& y) { return y + 1; }, 1),
                               });
  // Two worker threads fetch, transform and stack samples into batches ahead of the loop; the
  // batches and their order are the same as with num_workers = 0.
  hg::data::DataLoader loader(dataset, {.batch_size = 4, .shuffle = true, .seed = 1, .num_workers = 2});
  hg::data::DataLoader serial(dataset, {.batch_size = 4, .shuffle = true, .seed = 1});
  auto it = serial.begin();
  for (hg::TensorList batch : loader) {
    const hg::TensorList same = *it;
    ++it;
    HG_CHECK(batch[0].to_vector<float>() == same[0].to_vector<float>() &&
                 batch[1].to_vector<int64_t>() == same[1].to_vector<int64_t>(),
             "guide", "workers change nothing");
    fmt::print("images {} labels {}\n", batch[0].shape(), batch[1].to_vector<int64_t>());
  }
  HG_CHECK(loader.size() == 3, "guide", "10 samples in batches of 4: the last one holds 2");
}
