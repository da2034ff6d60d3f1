// amp_bench's own pieces: percentiles, flag parsing, the portable random numbers the PyTorch
// script must reproduce, model FLOP counts, the comparisons, and the JSON it writes. Its own test
// program, so the library's test suites never link the benchmark.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

#include "examples/gpt2_model.h"
#include "gpt2_cell.h"
#include "models.h"
#include "options.h"
#include "portable_random.h"
#include "report.h"
#include "rounds.h"
#include "runner.h"
#include "stats.h"
#include "torch_side.h"

using namespace amp_bench;

namespace {

ParseOutcome parse(std::vector<const char*> args) {
  args.insert(args.begin(), "amp_bench");
  return parse_options(static_cast<int>(args.size()), args.data());
}

CellResult cell(const std::string& precision, double median_ms, double loss) {
  CellResult c;
  c.model = "mnist_mlp";
  c.precision = precision;
  c.device = "cpu";
  c.batch = 128;
  c.hg.steps = 3;
  c.hg.step_ms = summarize({median_ms * 0.9, median_ms, median_ms * 1.2});
  c.hg.samples_per_s = 128 / (median_ms / 1000);
  c.hg.final_loss = loss;
  return c;
}

}  // namespace

TEST_CASE("amp_bench: percentiles interpolate between order statistics as numpy does") {
  const std::vector<double> v = {10, 1, 9, 2, 8, 3, 7, 4, 6, 5};  // unsorted on purpose
  CHECK(percentile(v, 50) == doctest::Approx(5.5));
  CHECK(percentile(v, 10) == doctest::Approx(1.9));
  CHECK(percentile(v, 90) == doctest::Approx(9.1));
  CHECK(percentile(v, 0) == 1);
  CHECK(percentile(v, 100) == 10);
  CHECK(percentile({4.0}, 90) == 4);
  CHECK(percentile({1.0, 3.0, 2.0}, 50) == 2);
  CHECK_THROWS_AS(percentile({}, 50), std::invalid_argument);
  CHECK_THROWS_AS(percentile(v, 101), std::invalid_argument);

  const Summary s = summarize(v);
  CHECK(s.count == 10);
  CHECK(s.median == doctest::Approx(5.5));
  CHECK(s.mean == doctest::Approx(5.5));
  CHECK(s.min == 1);
  CHECK(s.max == 10);
  CHECK(summarize({}).count == 0);
}

TEST_CASE("amp_bench: flags") {
  SUBCASE("defaults run the whole matrix but gpt2; all adds it") {
    const auto p = parse({});
    REQUIRE(p.run);
    CHECK(p.options.models == kDefaultModels);
    CHECK(parse({"--models", "all"}).options.models == kAllModels);
    CHECK(parse({"--quick"}).options.gpt2_cpu == "tiny:64:4");
    CHECK(parse({"--quick", "--gpt2-cpu", "d4:128:2"}).options.gpt2_cpu == "d4:128:2");
    CHECK(p.options.precisions == kAllPrecisions);
    CHECK(p.options.devices.empty());
    CHECK(p.options.steps == 30);
    CHECK(p.options.warmup == 5);
    CHECK_FALSE(p.options.no_torch);
    CHECK(p.options.optim_size == 4096);
    CHECK(p.options.rounds == 1);
    CHECK(parse({"--kernels", "--optim-size", "64"}).options.optim_size == 64);
    CHECK(parse({"--rounds", "3"}).options.rounds == 3);
  }
  SUBCASE("lists and filters") {
    const auto p = parse({"--models", "linear,mnist_cnn", "--precisions=bf16", "--devices", "cpu", "--steps", "7",
                          "--warmup", "0", "--no-torch", "--json", "out.json", "--threads", "1"});
    REQUIRE(p.run);
    CHECK(p.options.models == std::vector<std::string>{"linear", "mnist_cnn"});
    CHECK(p.options.precisions == std::vector<std::string>{"bf16"});
    CHECK(parse({"--precisions", "bf16,fp8"}).options.precisions == std::vector<std::string>{"bf16", "fp8"});
    CHECK(std::count(kAllPrecisions.begin(), kAllPrecisions.end(), "fp8") == 0);  // asked for, not by default
    CHECK(p.options.devices == std::vector<std::string>{"cpu"});
    CHECK(p.options.steps == 7);
    CHECK(p.options.warmup == 0);
    CHECK(p.options.no_torch);
    CHECK(p.options.json == "out.json");
    CHECK(p.options.threads == 1);
    CHECK(parse({"--models", "all"}).options.models == kAllModels);
  }
  SUBCASE("--quick shortens what was not given") {
    auto p = parse({"--quick"});
    REQUIRE(p.run);
    CHECK(p.options.steps == 5);
    CHECK(p.options.warmup == 1);
    CHECK(p.options.wide_batch_cpu == 16);
    CHECK(p.options.torch_max_seconds == 5);
    p = parse({"--quick", "--steps", "2", "--warmup", "1"});
    CHECK(p.options.steps == 2);
    CHECK(p.options.warmup == 1);
  }
  SUBCASE("bad flags stop with an error status") {
    for (auto args : std::vector<std::vector<const char*>>{{"--models", "resnet50"},
                                                           {"--precisions", "fp9"},
                                                           {"--devices", "tpu"},
                                                           {"--steps", "0"},
                                                           {"--warmup", "-1"},
                                                           {"--models", ","},
                                                           {"--optim-size", "0"},
                                                           {"--optim-size", "20000"},
                                                           {"--rounds", "0"},
                                                           {"--frobnicate"}}) {
      const auto p = parse(args);
      CHECK_FALSE(p.run);
      CHECK(p.exit_code != 0);
    }
  }
  CHECK(split_list("a,,b,") == std::vector<std::string>{"a", "b"});
}

TEST_CASE("amp_bench: portable random numbers match tools/amp_bench_torch.py bit for bit") {
  // Values printed by the Python script's stream_uniform and build_model.
  const StreamUniform u0(0, 0), u1(42, 1001);
  CHECK(u0(0) == 0.13870936632156372);
  CHECK(u0(1) == 0.2582654356956482);
  CHECK(u0(2) == 0.5748404264450073);
  CHECK(u1(0) == 0.942330539226532);
  CHECK(u1(1) == 0.9023277759552002);

  const auto model = build_model("linear", 0);
  const auto params = model->parameters();
  REQUIRE(params.size() == 2);
  const auto w = params[0].to_vector<float>();
  const auto b = params[1].to_vector<float>();
  CHECK(static_cast<double>(w[0]) == 0.022677961736917496);
  CHECK(static_cast<double>(w[1]) == -0.0028628366999328136);
  CHECK(static_cast<double>(w[2]) == -0.0014307711971923709);
  CHECK(static_cast<double>(b[0]) == -0.001649941666983068);
  CHECK(static_cast<double>(b[1]) == 0.014319926500320435);
}

TEST_CASE("amp_bench: models and FLOP floors") {
  CHECK(model_info("mnist_mlp").forward_flops_per_sample == 2.0 * (784 * 512 + 512 * 512 + 512 * 10));
  CHECK(train_flops_per_step(model_info("mnist_mlp"), 128) == 3.0 * 128 * 2.0 * (784 * 512 + 512 * 512 + 512 * 10));
  CHECK(model_info("mnist_cnn").forward_flops_per_sample ==
        doctest::Approx(2.0 * (26 * 26 * 32 * 9 + 24 * 24 * 64 * 288 + 9216 * 128 + 128 * 10)));
  CHECK(model_info("wide_mlp").classes == 4096);
  CHECK_FALSE(model_info("wide_mlp").mnist_shaped);
  CHECK_THROWS_WITH_AS(model_info("vgg"), doctest::Contains("unknown model 'vgg'"), hg::Error);
  // ResNet-18 at 3x32x32: 555,422,720 multiply-adds and 11,173,962 parameters (counted on
  // tools/amp_bench_torch.py's resnet18(10) with forward hooks in PyTorch 1.13).
  CHECK(model_info("resnet").forward_flops_per_sample == 2.0 * 555422720);
  CHECK(build_model("resnet", 1)->num_parameters() == 11173962);
  // ResNet-50 (the resnet cell on CUDA): torchvision's resnet50() count, and the FLOPs of
  // tools/amp_bench_torch.py's resnet50(1000) with forward hooks on one 3x224x224 image.
  CHECK(model_info("resnet50").sample_shape == std::vector<int64_t>{3, 224, 224});
  CHECK(model_info("resnet50").forward_flops_per_sample == 8178368512.0);
  CHECK(build_model("resnet50", 1)->num_parameters() == 25557032);
  Options o;
  CHECK(resnet_arch(o, "resnet", "cpu") == "resnet18");
  CHECK(resnet_arch(o, "resnet", "cuda") == "resnet50");
  CHECK(channels_last(o, "resnet", "cuda"));
  CHECK_FALSE(channels_last(o, "resnet", "cpu"));
  o.resnet_channels_last = false;
  CHECK_FALSE(channels_last(o, "resnet", "cuda"));
  const auto cnn = build_model("mnist_cnn", 1);
  CHECK(cnn->num_parameters() == 32 * 9 + 32 + 64 * 288 + 64 + 9216 * 128 + 128 + 1280 + 10);
  const auto w = cnn->parameters()[0].to_vector<float>();
  for (float x : w) CHECK(std::abs(x) <= 1.0f / 3.0f);  // conv1: fan_in 9
}

TEST_CASE("amp_bench: the gpt2 cell's spec, parameter count, FLOP count and batches") {
  const Gpt2Spec d12 = parse_gpt2_spec("d12:1024:16", "--gpt2-cuda");
  CHECK(d12.layers == 12);
  CHECK(d12.embd == 768);
  CHECK(d12.batch == 16);
  CHECK(d12.tokens_per_step() == 16 * 1024);
  // llm.c's GPT-2 124M with the padded vocabulary: 124,475,904 parameters.
  CHECK(d12.parameters() == 124475904);
  CHECK(d12.train_flops_per_token() == 6.0 * 124475904 + 6.0 * 12 * 768 * 1024);
  // The count is the built model's, at a context other than the size's own.
  const Gpt2Spec tiny = parse_gpt2_spec("tiny:32:3", "--gpt2-cpu");
  gpt2::Config c{tiny.layers, tiny.heads, tiny.embd, tiny.context};
  CHECK(gpt2::GPT2(c).num_parameters() == tiny.parameters());
  const auto batches = gpt2_batches(tiny, 0);
  REQUIRE(batches.size() == static_cast<size_t>(kBatchesPerCell));
  CHECK(batches[0].x.shape() == hg::Shape{3, 32});
  CHECK(batches[0].y.shape() == hg::Shape{3, 32});
  CHECK(batches[0].x.narrow(1, 1, 31).to_vector<int64_t>() ==
        batches[0].y.narrow(1, 0, 31).to_vector<int64_t>());  // y is x shifted by one
  CHECK(batches[0].x.max().item<int64_t>() < 50257);
  CHECK(batches[0].x.to_vector<int64_t>() != batches[1].x.to_vector<int64_t>());
  for (const char* bad : {"d4", "d4:256", "d5:256:4", "d4:0:4", "d4:256:x", "d4:256:4:1", "d4:-3:4"})
    CHECK_THROWS_WITH_AS(parse_gpt2_spec(bad, "--gpt2-cpu"), doctest::Contains("--gpt2-cpu"), hg::Error);
}

TEST_CASE("amp_bench: comparisons and the JSON document") {
  std::vector<CellResult> cells = {cell("fp32", 10, 0.5), cell("bf16", 5, 0.52), cell("fp16", 4, 0.0)};
  cells[2].hg = SideResult{};
  cells[2].hg.status = "error";
  cells[2].hg.note = "[autocast] something";
  cells[0].torch = SideResult{};
  cells[0].torch->step_ms.median = 20;
  cells[1].torch = SideResult{};
  cells[1].torch->status = "unsupported";
  derive_comparisons(cells);
  CHECK(cells[0].speedup_vs_fp32 == doctest::Approx(1.0));
  CHECK(cells[1].speedup_vs_fp32 == doctest::Approx(2.0));
  CHECK(cells[1].loss_diff_vs_fp32 == doctest::Approx(0.02));
  CHECK(std::isnan(cells[2].speedup_vs_fp32));
  CHECK(cells[0].hg_over_torch == doctest::Approx(0.5));
  CHECK(std::isnan(cells[1].hg_over_torch));

  RunInfo info = machine_info();
  info.threads = 2;
  info.data = "synthetic";
  const auto j = to_json(info, Options{}, cells);
  CHECK(j["tool"] == "amp_bench");
  for (const char* key : {"date", "command", "machine", "settings", "torch", "results", "notes"})
    CHECK_MESSAGE(j.contains(key), key);
  CHECK(j["machine"]["load_average_start"].size() == 3);
  REQUIRE(j["results"].size() == 3);
  const auto& r0 = j["results"][0];
  for (const char* key : {"model", "precision", "device", "batch", "flops_per_step", "halfgrad", "torch",
                          "speedup_vs_fp32", "loss_diff_vs_fp32", "hg_over_torch"})
    CHECK_MESSAGE(r0.contains(key), key);
  for (const char* key : {"status", "steps", "step_ms", "samples_per_s", "final_loss", "peak_bytes", "cell_bytes"})
    CHECK_MESSAGE(r0["halfgrad"].contains(key), key);
  for (const char* key : {"median", "p10", "p90", "mean", "min", "max"})
    CHECK_MESSAGE(r0["halfgrad"]["step_ms"].contains(key), key);
  CHECK(r0["halfgrad"]["step_ms"]["median"] == 10.0);
  CHECK(r0["hg_over_torch"] == 0.5);
  CHECK(j["results"][1]["torch"]["status"] == "unsupported");
  CHECK(j["results"][1]["hg_over_torch"].is_null());  // NaN is written as null, never as invalid JSON
  CHECK(j["results"][2]["halfgrad"]["status"] == "error");
  CHECK_FALSE(j["results"][2]["halfgrad"].contains("step_ms"));
  CHECK(nlohmann::json::parse(j.dump()) == j);
}

TEST_CASE("amp_bench: reading the PyTorch script's results") {
  const auto torch_json = nlohmann::json::parse(R"({"results": [
    {"model": "mnist_mlp", "precision": "fp32", "device": "cpu", "batch": 128, "status": "ok", "note": "",
     "steps": 4, "step_ms": {"median": 6.0, "p10": 5.0, "p90": 7.0, "mean": 6.1, "min": 4.9, "max": 7.5},
     "samples_per_s": 21333.0, "final_loss": 2.25, "peak_bytes": 100, "cell_bytes": 10},
    {"model": "mnist_mlp", "precision": "fp16", "device": "cpu", "batch": 128, "status": "unsupported",
     "note": "no fp16 autocast on cpu"}]})");
  std::vector<CellResult> cells = {cell("fp32", 3, 2.2), cell("fp16", 3, 2.2), cell("bf16", 3, 2.2)};
  merge_torch(torch_json, cells);
  REQUIRE(cells[0].torch.has_value());
  CHECK(cells[0].torch->ok());
  CHECK(cells[0].torch->step_ms.median == 6.0);
  CHECK(cells[0].torch->steps == 4);
  CHECK(cells[0].torch->final_loss == 2.25);
  REQUIRE(cells[1].torch.has_value());
  CHECK(cells[1].torch->status == "unsupported");
  CHECK_FALSE(cells[2].torch.has_value());
  derive_comparisons(cells);
  CHECK(cells[0].hg_over_torch == doctest::Approx(0.5));
  CHECK(format_ms(123.4) == "123");
  CHECK(format_ms(12.34) == "12.3");
  CHECK(format_ms(1.234) == "1.23");
  CHECK(format_ms(0.1234) == "0.123");
  CHECK(format_ms(kNaN) == "-");
}

TEST_CASE("amp_bench: --rounds folds the rounds, each ratio taken within its round") {
  // Round 1 is a slow minute for halfgrad and a fast one for PyTorch, round 3 the other way: a
  // ratio of the medians over rounds would pair them; the median of the rounds' own ratios
  // does not.
  const double hg_fp32[] = {12, 10, 8}, torch_fp32[] = {15, 20, 20};
  const double hg_bf16[] = {6, 5, 5};
  std::vector<std::vector<CellResult>> rounds;
  for (int r = 0; r < 3; ++r) {
    std::vector<CellResult> cells = {cell("fp32", hg_fp32[r], 0.5), cell("bf16", hg_bf16[r], 0.52)};
    cells[0].torch = SideResult{};
    cells[0].torch->step_ms = summarize({torch_fp32[r] * 0.9, torch_fp32[r], torch_fp32[r] * 1.1});
    cells[0].torch->steps = 3;
    cells[1].torch = SideResult{};
    cells[1].torch->status = "unsupported";
    derive_comparisons(cells);
    rounds.push_back(cells);
  }
  const auto cells = combine_rounds(rounds);
  REQUIRE(cells.size() == 2);
  const CellResult& f = cells[0];
  CHECK(f.hg.step_ms.median == doctest::Approx(10));      // of 12, 10, 8
  CHECK(f.torch->step_ms.median == doctest::Approx(20));  // of 15, 20, 20
  CHECK(f.hg.step_ms.min == doctest::Approx(8 * 0.9));
  CHECK(f.hg.step_ms.max == doctest::Approx(12 * 1.2));
  CHECK(f.hg.steps == 9);
  CHECK(f.hg.step_ms.count == 9);
  CHECK(f.hg.samples_per_s == doctest::Approx(128 / 0.010));
  // Per round 12/15 = 0.8, 10/20 = 0.5, 8/20 = 0.4: the median is 0.5, not 10/20 by chance only.
  CHECK(f.hg_over_torch == doctest::Approx(0.5));
  REQUIRE(f.rounds.size() == 3);
  CHECK(f.rounds[0].hg_over_torch == doctest::Approx(0.8));
  CHECK(f.rounds[2].torch_median_ms == doctest::Approx(20));
  // bf16 against fp32 within each round: 12/6, 10/5, 8/5 -> median 2, where the medians' ratio
  // (10 / 5) happens to agree; the loss and status come through.
  CHECK(cells[1].speedup_vs_fp32 == doctest::Approx(2.0));
  CHECK(cells[1].hg.final_loss == doctest::Approx(0.52));
  CHECK(cells[1].torch->status == "unsupported");
  CHECK(std::isnan(cells[1].hg_over_torch));

  SUBCASE("the medians' ratio differs from the median of the ratios") {
    rounds[1][0].hg.step_ms = summarize({9, 10, 11});
    rounds[1][0].torch->step_ms = summarize({11, 12, 13});
    derive_comparisons(rounds[1]);
    const auto again = combine_rounds(rounds);
    // medians 10 and 15 (ratio 0.67); per round 0.8, 0.83, 0.4 -> 0.8
    CHECK(again[0].hg.step_ms.median == doctest::Approx(10));
    CHECK(again[0].torch->step_ms.median == doctest::Approx(15));
    CHECK(again[0].hg_over_torch == doctest::Approx(0.8));
  }
  SUBCASE("a side that failed in one round reports that failure") {
    rounds[2][1].hg = SideResult{};
    rounds[2][1].hg.status = "error";
    rounds[2][1].hg.note = "[autocast] round three";
    derive_comparisons(rounds[2]);
    const auto again = combine_rounds(rounds);
    CHECK(again[1].hg.status == "error");
    CHECK(again[1].hg.note == "[autocast] round three");
    CHECK(again[1].speedup_vs_fp32 == doctest::Approx(2.0));  // the rounds that ran: 2, 2
  }
  SUBCASE("PyTorch missing from a round (its script failed) leaves the others") {
    rounds[0][0].torch.reset();
    derive_comparisons(rounds[0]);
    const auto again = combine_rounds(rounds);
    CHECK(again[0].torch->step_ms.median == doctest::Approx(20));
    CHECK(again[0].hg_over_torch == doctest::Approx(0.45));  // of 0.5 and 0.4
    CHECK(std::isnan(again[0].rounds[0].torch_median_ms));
  }
  SUBCASE("one round comes back as it was") {
    const auto one = combine_rounds({rounds[0]});
    CHECK(one[0].hg.step_ms.median == doctest::Approx(12));
    CHECK(one[0].hg_over_torch == doctest::Approx(0.8));
    CHECK(one[0].rounds.size() == 1);
  }
  SUBCASE("rounds of different plans are refused") {
    auto other = rounds;
    other[1].pop_back();
    CHECK_THROWS_AS(combine_rounds(other), std::invalid_argument);
    CHECK_THROWS_AS(combine_rounds({}), std::invalid_argument);
  }
  SUBCASE("the table lists every round, the JSON carries them") {
    Options o;
    o.rounds = 3;
    RunInfo info = machine_info();
    const auto j = to_json(info, o, cells);
    CHECK(j["settings"]["rounds"] == 3);
    REQUIRE(j["results"][0]["rounds"].size() == 3);
    CHECK(j["results"][0]["rounds"][1]["hg_over_torch"] == doctest::Approx(0.5));
    CHECK(j["results"][1]["rounds"][0]["hg_over_torch"].is_null());
    char* text = nullptr;
    size_t size = 0;
    std::FILE* mem = open_memstream(&text, &size);
    REQUIRE(mem != nullptr);
    print_table(mem, info, o, cells);
    std::fclose(mem);
    const std::string printed(text, size);
    std::free(text);
    CHECK(printed.find("3 rounds") != std::string::npos);
    CHECK(printed.find("12.0 / 15.0 = 0.80  10.0 / 20.0 = 0.50  8.00 / 20.0 = 0.40") != std::string::npos);
  }
}
