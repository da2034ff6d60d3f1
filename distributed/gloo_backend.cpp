// The Gloo backend, for processes started torchrun-style (no mpirun): a full mesh of TCP pairs
// set up through the TcpStore on MASTER_ADDR:MASTER_PORT. Gloo's collectives block, so one
// worker thread per group runs them in the order they were issued (every rank issues the same
// sequence); Work waits on that thread's result. After a failure or a timeout the pairs are out
// of step, so every later collective of the group fails too, naming the first error.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "distributed/backend.h"
#include "distributed/tcp_store.h"
#include "framework/error.h"

#ifdef HG_WITH_GLOO
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#endif

namespace hg::distributed::detail {

#ifndef HG_WITH_GLOO

bool gloo_built() { return false; }
std::unique_ptr<Backend> make_gloo_backend(int, int, const std::string&, int, double) {
  fail("distributed", "built without Gloo");
}

#else

bool gloo_built() { return true; }

namespace {

struct Outcome {
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  std::string error;  // empty: succeeded
};

struct GlooWork : Work::Impl {
  std::shared_ptr<Outcome> outcome = std::make_shared<Outcome>();

  bool check_done(std::unique_lock<std::mutex>&) {
    if (!outcome->done) return false;
    if (!outcome->error.empty()) fail("distributed", "{} failed on rank {}: {}", what, rank, outcome->error);
    return true;
  }
  bool test() override {
    std::unique_lock lock(outcome->m);
    return check_done(lock);
  }
  bool wait_until(Clock::time_point deadline) override {
    std::unique_lock lock(outcome->m);
    outcome->cv.wait_until(lock, deadline, [&] { return outcome->done; });
    return check_done(lock);
  }
};

// Gloo's rendezvous reads and writes keys through this.
class StoreAdapter final : public gloo::rendezvous::Store {
 public:
  explicit StoreAdapter(TcpStore& store) : store_(store) {}
  void set(const std::string& key, const std::vector<char>& data) override { store_.set(key, data); }
  std::vector<char> get(const std::string& key) override { return store_.get(key); }
  void wait(const std::vector<std::string>& keys) override {
    for (const auto& k : keys) store_.get(k);
  }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds&) override { wait(keys); }

 private:
  TcpStore& store_;
};

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

template <typename T>
ReduceFn reduce_fn(BufferOp op) {
  return op == BufferOp::Max ? static_cast<ReduceFn>(&gloo::max<T>) : static_cast<ReduceFn>(&gloo::sum<T>);
}

size_t byte_size(const Tensor& t) { return static_cast<size_t>(t.numel()) * element_size(t.dtype()); }
uint8_t* byte_ptr(const Tensor& t) { return static_cast<uint8_t*>(t.raw_data()); }

template <Dtype D, BufferOp Op>
void combine_16bit_fn(void* c, const void* a, const void* b, size_t n) {
  combine_16bit(D, Op, a, b, c, n);
}

ReduceFn reduce_fn_16bit(Dtype dtype, BufferOp op) {
  if (dtype == kBFloat16)
    return op == BufferOp::Max ? &combine_16bit_fn<kBFloat16, BufferOp::Max>
                               : &combine_16bit_fn<kBFloat16, BufferOp::Sum>;
  return op == BufferOp::Max ? &combine_16bit_fn<kFloat16, BufferOp::Max> : &combine_16bit_fn<kFloat16, BufferOp::Sum>;
}

// In place over the group: buffer (float32, float64, or 16-bit reduced natively) <- op over ranks.
void reduce_in_place(const std::shared_ptr<gloo::Context>& ctx, void* data, size_t n, Dtype dtype, BufferOp op,
                     uint32_t tag, std::chrono::milliseconds timeout) {
  gloo::AllreduceOptions o(ctx);
  o.setTag(tag);
  o.setTimeout(timeout);
  if (is_reduced_float(dtype)) {
    o.setOutput(static_cast<uint16_t*>(data), n);
    o.setReduceFunction(reduce_fn_16bit(dtype, op));
  } else if (dtype == kFloat64) {
    o.setOutput(static_cast<double*>(data), n);
    o.setReduceFunction(reduce_fn<double>(op));
  } else {
    o.setOutput(static_cast<float*>(data), n);
    o.setReduceFunction(reduce_fn<float>(op));
  }
  gloo::allreduce(o);
}

class GlooBackend final : public Backend {
 public:
  GlooBackend(int rank, int world_size, const std::string& master_addr, int master_port, double timeout_s)
      : rank_(rank), world_size_(world_size) {
    set_timeout(timeout_s);
    gloo::transport::tcp::attr attr;
    std::unique_ptr<gloo::rendezvous::Store> store;
    if (world_size == 1) {
      store = std::make_unique<gloo::rendezvous::HashStore>();
      attr.hostname = "127.0.0.1";
    } else {
      tcp_store_ = std::make_unique<TcpStore>(master_addr, master_port, rank == 0, timeout_s,
                                              TcpStoreOptions::from_env(world_size));
      // The interface to listen on: GLOO_SOCKET_IFNAME as in PyTorch, else the one this process
      // reached MASTER_ADDR through (the other ranks reach this one the same way).
      if (const char* iface = std::getenv("GLOO_SOCKET_IFNAME"); iface && *iface)
        attr.iface = iface;
      else
        attr.hostname = tcp_store_->local_address();
      store = std::make_unique<StoreAdapter>(*tcp_store_);
    }
    try {
      auto device = gloo::transport::tcp::CreateDevice(attr);
      auto context = std::make_shared<gloo::rendezvous::Context>(rank, world_size);
      context->setTimeout(timeout());
      context->connectFullMesh(*store, device);
      context_ = context;
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      fail("distributed", "Gloo rendezvous of rank {} of {} through {}:{} failed: {}", rank, world_size, master_addr,
           master_port, e.what());
    }
    try {
      worker_ = std::thread([this] { run(); });
    } catch (const std::system_error& e) {  // no thread to be had: an hg::Error, not a std:: one
      fail("distributed", "Gloo: cannot start the collectives' worker thread: {}", e.what());
    }
  }

  ~GlooBackend() override {
    {
      std::lock_guard lock(m_);
      stop_ = true;
    }
    cv_.notify_all();
    if (worker_.joinable()) worker_.join();
    context_.reset();
    tcp_store_.reset();
  }

  const char* name() const override { return "gloo"; }
  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  bool thread_multiple() const override { return true; }
  void set_timeout(double seconds) override { timeout_ms_ = static_cast<int64_t>(seconds * 1000.0 + 0.5); }

  std::shared_ptr<Work::Impl> all_reduce(const Tensor& buf, BufferOp op) override {
    return enqueue([buf, op](Ctx& ctx, uint32_t tag, Ms timeout) {
      reduce_in_place(ctx, buf.raw_data(), static_cast<size_t>(buf.numel()), buf.dtype(), op, tag, timeout);
    });
  }

  std::shared_ptr<Work::Impl> broadcast(const Tensor& buf, int root) override {
    return enqueue([buf, root](Ctx& ctx, uint32_t tag, Ms timeout) {
      gloo::BroadcastOptions o(ctx);
      o.setTag(tag);
      o.setTimeout(timeout);
      o.setRoot(root);
      o.setOutput(byte_ptr(buf), byte_size(buf));
      gloo::broadcast(o);
    });
  }

  std::shared_ptr<Work::Impl> all_gather(const Tensor& output, const Tensor& input) override {
    return enqueue([output, input](Ctx& ctx, uint32_t tag, Ms timeout) {
      gloo::AllgatherOptions o(ctx);
      o.setTag(tag);
      o.setTimeout(timeout);
      o.setInput(byte_ptr(input), byte_size(input));
      o.setOutput(byte_ptr(output), byte_size(output));
      gloo::allgather(o);
    });
  }

  // Gloo 0.5 has no reduce-scatter with the new-style options: an all-reduce of a copy, of which
  // this rank keeps its rows (world_size times the traffic of a ring reduce-scatter).
  std::shared_ptr<Work::Impl> reduce_scatter(const Tensor& output, const Tensor& input, BufferOp op) override {
    int rank = rank_;
    return enqueue([output, input, op, rank](Ctx& ctx, uint32_t tag, Ms timeout) {
      std::vector<uint8_t> all(byte_ptr(input), byte_ptr(input) + byte_size(input));
      reduce_in_place(ctx, all.data(), static_cast<size_t>(input.numel()), input.dtype(), op, tag, timeout);
      std::copy_n(all.data() + byte_size(output) * rank, byte_size(output), byte_ptr(output));
    });
  }

  std::shared_ptr<Work::Impl> barrier() override {
    return enqueue([](Ctx& ctx, uint32_t tag, Ms timeout) {
      gloo::BarrierOptions o(ctx);
      o.setTag(tag);
      o.setTimeout(timeout);
      gloo::barrier(o);
    });
  }

  [[noreturn]] void abort(int code) override {
    std::fflush(nullptr);
    std::_Exit(code);  // the peers' pairs close, so their collectives fail at once
  }

 private:
  using Ctx = const std::shared_ptr<gloo::Context>;
  using Ms = std::chrono::milliseconds;
  using Op = std::function<void(Ctx&, uint32_t, Ms)>;

  Ms timeout() const { return Ms(timeout_ms_.load()); }

  std::shared_ptr<Work::Impl> enqueue(Op op) {
    auto w = std::make_shared<GlooWork>();
    Ms op_timeout = timeout();
    {
      std::lock_guard lock(m_);
      queue_.push_back([this, op = std::move(op), outcome = w->outcome, op_timeout] {
        std::string error;
        if (!broken_.empty()) {
          error = "an earlier collective failed, so the group cannot be used any more (" + broken_ + ")";
        } else {
          try {
            op(context_, next_tag_++, op_timeout);
          } catch (const std::exception& e) {
            error = e.what();
            broken_ = error;
          }
        }
        {
          std::lock_guard done_lock(outcome->m);
          outcome->done = true;
          outcome->error = error;
        }
        outcome->cv.notify_all();
      });
    }
    cv_.notify_all();
    return w;
  }

  // The worker: runs queued collectives one after another until the backend is destroyed.
  void run() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock lock(m_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task();
    }
  }

  int rank_;
  int world_size_;
  std::atomic<int64_t> timeout_ms_{0};
  std::unique_ptr<TcpStore> tcp_store_;
  std::shared_ptr<gloo::Context> context_;
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::function<void()> > queue_;
  bool stop_ = false;
  std::string broken_;     // the worker's first error
  uint32_t next_tag_ = 0;  // worker only
  std::thread worker_;
};

}  // namespace

std::unique_ptr<Backend> make_gloo_backend(int rank, int world_size, const std::string& master_addr, int master_port,
                                           double timeout_s) {
  return std::make_unique<GlooBackend>(rank, world_size, master_addr, master_port, timeout_s);
}

#endif

}  // namespace hg::distributed::detail
