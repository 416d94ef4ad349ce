// The C++ half of the Gloo backend (see mod.rs for what is supported and why).
#include "collectives/src/backends/gloo/shim.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "collectives/src/backends/gloo/mod.rs.h"
#include "gloo/algorithm.h"
#include "gloo/allgather.h"
#include "gloo/allreduce.h"
#include "gloo/allreduce_bcube.h"
#include "gloo/allreduce_halving_doubling.h"
#include "gloo/allreduce_ring.h"
#include "gloo/allreduce_ring_chunked.h"
#include "gloo/alltoall.h"
#include "gloo/barrier.h"
#include "gloo/broadcast.h"
#include "gloo/gather.h"
#include "gloo/reduce.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/store.h"
#include "gloo/scatter.h"
#include "gloo/transport/tcp/device.h"
#include "gloo/types.h"

namespace ringside_gloo {
namespace {

// Point-to-point messages use one fixed slot: Gloo matches a recv to the
// sender's sends on that slot in order, which is exactly send/recv's contract.
// The prefix byte keeps it clear of the slots collectives build from tags.
constexpr uint64_t kP2PSlot = 0x7eULL << 56;

// Runs `f`, turning anything thrown into a std::runtime_error the cxx bridge
// can catch (it only catches std::exception; anything else would terminate).
template <typename F>
auto guarded(const char* what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string(what) + ": " + e.what());
  } catch (...) {
    throw std::runtime_error(std::string(what) + ": unknown C++ exception");
  }
}

// bfloat16: Gloo has no such type, so reductions on it are ours.
struct alignas(2) Bf16 {
  uint16_t x;
};

float to_float(Bf16 v) {
  uint32_t bits = static_cast<uint32_t>(v.x) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

Bf16 from_float_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    return Bf16{static_cast<uint16_t>((bits >> 16) | 0x40)};  // quiet NaN
  }
  // Round to nearest, ties to even (as the `half` crate does).
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return Bf16{static_cast<uint16_t>((bits + rounding) >> 16)};
}

// How elements of each type are combined: half types through float, rounded
// once per operation (what ringside's reference kernels do); integers wrap.
template <typename T>
struct Arith {
  using Acc = T;
  static Acc load(T v) { return v; }
  static T store(Acc v) { return v; }
};
template <>
struct Arith<gloo::float16> {
  using Acc = float;
  static Acc load(gloo::float16 v) { return gloo::cpu_half2float(v); }
  static gloo::float16 store(Acc v) { return gloo::cpu_float2half_rn(v); }
};
template <>
struct Arith<Bf16> {
  using Acc = float;
  static Acc load(Bf16 v) { return to_float(v); }
  static Bf16 store(Acc v) { return from_float_bf16(v); }
};

enum Op : uint8_t { kSum = 0, kProd = 1, kMin = 2, kMax = 3 };

template <typename A>
A combine(Op op, A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    switch (op) {
      case kSum:
        return static_cast<A>(static_cast<U>(a) + static_cast<U>(b));
      case kProd:
        return static_cast<A>(static_cast<U>(a) * static_cast<U>(b));
      case kMin:
        return std::min(a, b);
      default:
        return std::max(a, b);
    }
  } else {
    switch (op) {
      case kSum:
        return a + b;
      case kProd:
        return a * b;
      case kMin:
        return std::min(a, b);
      default:
        return std::max(a, b);
    }
  }
}

template <typename T, Op op>
void kernel3(void* out, const void* a, const void* b, size_t n) {
  auto* o = static_cast<T*>(out);
  const auto* x = static_cast<const T*>(a);
  const auto* y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; i++) {
    o[i] = Arith<T>::store(combine<typename Arith<T>::Acc>(op, Arith<T>::load(x[i]),
                                                           Arith<T>::load(y[i])));
  }
}

template <typename T, Op op>
void kernel2(T* x, const T* y, size_t n) {
  kernel3<T, op>(x, x, y, n);
}

// The three-argument reduction the options-style algorithms take.
template <typename T>
gloo::AllreduceOptions::Func func3(uint8_t op) {
  switch (op) {
    case kSum:
      return &kernel3<T, kSum>;
    case kProd:
      return &kernel3<T, kProd>;
    case kMin:
      return &kernel3<T, kMin>;
    case kMax:
      return &kernel3<T, kMax>;
  }
  throw std::invalid_argument("unknown reduction op");
}

// The typed reduction function the classic algorithm classes take. Static, so
// it outlives every algorithm object built from it.
template <typename T>
const gloo::ReductionFunction<T>* func2(uint8_t op) {
  static const gloo::ReductionFunction<T> sum(gloo::SUM, &kernel2<T, kSum>);
  static const gloo::ReductionFunction<T> prod(gloo::PRODUCT, &kernel2<T, kProd>);
  static const gloo::ReductionFunction<T> mn(gloo::MIN, &kernel2<T, kMin>);
  static const gloo::ReductionFunction<T> mx(gloo::MAX, &kernel2<T, kMax>);
  switch (op) {
    case kSum:
      return &sum;
    case kProd:
      return &prod;
    case kMin:
      return &mn;
    case kMax:
      return &mx;
  }
  throw std::invalid_argument("unknown reduction op");
}

// Calls `f` with a value of the C++ type for ringside's dtype code.
template <typename F>
void with_dtype(uint8_t dtype, F&& f) {
  switch (dtype) {
    case 0:
      return f(float{});
    case 1:
      return f(double{});
    case 2:
      return f(gloo::float16{});
    case 3:
      return f(Bf16{});
    case 4:
      return f(int32_t{});
    case 5:
      return f(int64_t{});
    case 6:
      return f(uint8_t{});
  }
  throw std::invalid_argument("unknown dtype code");
}

// A Gloo store whose every operation is a call into ringside's Store.
class RustStore : public gloo::rendezvous::Store {
 public:
  explicit RustStore(const Kv& kv) : kv_(kv) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    kv_set(kv_, key, rust::Slice<const uint8_t>(
                         reinterpret_cast<const uint8_t*>(data.data()), data.size()));
  }
  std::vector<char> get(const std::string& key) override {
    rust::Vec<uint8_t> v = kv_get(kv_, key);
    return std::vector<char>(v.begin(), v.end());
  }
  // Our store's get already waits (with its own timeout) for a key to appear.
  void wait(const std::vector<std::string>& keys) override {
    for (const auto& k : keys) {
      kv_get(kv_, k);
    }
  }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& /*timeout*/) override {
    wait(keys);
  }

 private:
  const Kv& kv_;
};

}  // namespace

Comm::Comm(std::shared_ptr<gloo::Context> ctx, std::shared_ptr<gloo::Context> classic_ctx,
           std::chrono::milliseconds timeout)
    : ctx_(std::move(ctx)), classic_ctx_(std::move(classic_ctx)), timeout_(timeout) {}

Comm::~Comm() = default;

// libtorch_cpu.so bundles its own Gloo with exported symbols. In a process that
// loaded libtorch before libgloo (a binary linking tch and this crate), the
// dynamic linker binds this shim's gloo:: calls to torch's build, compiled
// against other headers, and the first call crashes. Find out which library
// serves gloo:: here and refuse, with the fix, instead of crashing.
void check_gloo_is_debians() {
  Dl_info info{};
  auto fn = &gloo::transport::tcp::CreateDevice;
  if (dladdr(reinterpret_cast<void*>(fn), &info) != 0 && info.dli_fname != nullptr) {
    std::string file(info.dli_fname);
    if (file.find("libgloo") == std::string::npos) {
      throw std::runtime_error(
          "gloo:: symbols resolve to " + file +
          " (a bundled Gloo, e.g. libtorch's), not Debian's libgloo: the shim would crash. "
          "Load libgloo first: LD_PRELOAD=/usr/lib/libgloo.so.0 (ringside's training binaries "
          "do this themselves)");
    }
  }
}

std::unique_ptr<Comm> connect(const Kv& kv, int32_t rank, int32_t size, rust::Str iface,
                              rust::Str hostname, int64_t timeout_ms, bool classic) {
  return guarded("gloo connect", [&] {
    check_gloo_is_debians();
    gloo::transport::tcp::attr attr;
    if (iface.size() > 0) {
      attr.iface = std::string(iface);
    } else {
      attr.hostname = std::string(hostname);
    }
    auto dev = gloo::transport::tcp::CreateDevice(attr);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
    auto timeout = std::chrono::milliseconds(timeout_ms);
    ctx->setTimeout(timeout);
    RustStore store(kv);
    ctx->connectFullMesh(store, dev);
    // Gloo's classic algorithm objects get a context (and TCP connections) of
    // their own: sharing one with the options-style collectives hung
    // gloo::reduce after a classic all_reduce in testing. The factory
    // exchanges addresses over the first context, not the store.
    std::shared_ptr<gloo::Context> classic_ctx;
    if (classic) {
      auto classic_dev = gloo::transport::tcp::CreateDevice(attr);
      gloo::rendezvous::ContextFactory factory(ctx);
      classic_ctx = factory.makeContext(classic_dev);
      classic_ctx->setTimeout(timeout);
    }
    return std::make_unique<Comm>(std::move(ctx), std::move(classic_ctx), timeout);
  });
}

// Gloo's classic algorithm objects are built once per (algorithm, dtype, op,
// count) and kept, as Gloo intends (and as its own benchmarks use them):
// building and destroying one per call left late messages for destroyed
// buffers and hung the next collective. Every rank makes the same calls in the
// same order, so every rank builds and evicts the same objects at the same
// point. Each owns an aligned work buffer that the caller's data is copied
// through, because the object is bound to its buffer at construction.
struct Comm::Classic {
  std::unique_ptr<gloo::Algorithm> algo;
  std::vector<uint64_t> work;
  uint64_t last_use = 0;
};

void Comm::classic_barrier() {
  gloo::BarrierOptions b(classic_ctx_);
  b.setTag(0xffffff);
  b.setTimeout(timeout_);
  gloo::barrier(b);
}

void Comm::all_reduce(rust::Slice<uint8_t> buf, uint8_t dtype, uint8_t op, uint8_t algo,
                      uint64_t segment_bytes, uint32_t tag) {
  guarded("gloo all_reduce", [&] {
    if (algo == 0 || algo == 1 || algo == 4 || !classic_ctx_) {
      with_dtype(dtype, [&](auto zero) {
        using T = decltype(zero);
        gloo::AllreduceOptions opts(ctx_);
        if (algo == 1) opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
        if (algo == 4) opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::BCUBE);
        opts.setOutput(reinterpret_cast<T*>(buf.data()), buf.size() / sizeof(T));
        opts.setReduceFunction(func3<T>(op));
        opts.setTag(next_tag());
        opts.setTimeout(timeout_);
        // 0 keeps Gloo's own limit (SEGMENT_BYTES in mod.rs says why not always).
        if (segment_bytes > 0) opts.setMaxSegmentSize(segment_bytes);
        gloo::allreduce(opts);
      });
      return;
    }
    auto key = std::make_tuple(algo, dtype, op, static_cast<uint64_t>(buf.size()));
    auto it = classic_.find(key);
    if (it == classic_.end()) {
      if (classic_.size() >= kMaxClassic) {
        auto oldest = classic_.begin();
        for (auto j = classic_.begin(); j != classic_.end(); ++j) {
          if (j->second->last_use < oldest->second->last_use) oldest = j;
        }
        // Nobody may still be sending to the buffers about to go away.
        classic_barrier();
        classic_.erase(oldest);
      }
      auto c = std::make_unique<Classic>();
      c->work.resize((buf.size() + 7) / 8);
      with_dtype(dtype, [&](auto zero) {
        using T = decltype(zero);
        std::vector<T*> ptrs{reinterpret_cast<T*>(c->work.data())};
        int n = static_cast<int>(buf.size() / sizeof(T));
        switch (algo) {
          case 1:
            c->algo = std::make_unique<gloo::AllreduceRing<T>>(classic_ctx_, ptrs, n, func2<T>(op));
            break;
          case 2:
            c->algo =
                std::make_unique<gloo::AllreduceRingChunked<T>>(classic_ctx_, ptrs, n, func2<T>(op));
            break;
          case 3:
            c->algo = std::make_unique<gloo::AllreduceHalvingDoubling<T>>(classic_ctx_, ptrs, n,
                                                                          func2<T>(op));
            break;
          case 4:
            c->algo = std::make_unique<gloo::AllreduceBcube<T>>(classic_ctx_, ptrs, n, func2<T>(op));
            break;
          default:
            throw std::invalid_argument("unknown all_reduce algorithm code");
        }
      });
      // Gloo's TCP event loop blocks when a message arrives for a buffer not
      // yet registered; so no rank may send to this object before every rank
      // has built it.
      classic_barrier();
      it = classic_.emplace(key, std::move(c)).first;
    }
    Classic& c = *it->second;
    c.last_use = ++uses_;
    // Through ringside's copy (collectives/src/copy.rs), which avoids glibc's
    // slow `rep movsb` case.
    rust::Slice<uint8_t> work(reinterpret_cast<uint8_t*>(c.work.data()), buf.size());
    copy_bytes(work, rust::Slice<const uint8_t>(buf.data(), buf.size()));
    c.algo->run();
    copy_bytes(buf, rust::Slice<const uint8_t>(work.data(), work.size()));
  });
}

void Comm::broadcast(rust::Slice<uint8_t> buf, int32_t root, uint32_t tag) {
  guarded("gloo broadcast", [&] {
    gloo::BroadcastOptions opts(ctx_);
    opts.setOutput(buf.data(), buf.size());
    opts.setRoot(root);
    opts.setTag(next_tag());
    opts.setTimeout(timeout_);
    gloo::broadcast(opts);
  });
}

void Comm::reduce(rust::Slice<uint8_t> buf, uint8_t dtype, uint8_t op, int32_t root,
                  uint32_t tag) {
  guarded("gloo reduce", [&] {
    with_dtype(dtype, [&](auto zero) {
      using T = decltype(zero);
      T* ptr = reinterpret_cast<T*>(buf.data());
      size_t count = buf.size() / sizeof(T);
      if (classic_ctx_) {
        // With classic algorithm objects alive on this device, gloo::reduce
        // hung in testing (every rank waiting in it); an all_reduce, which
        // every rank's buffer here can take, does not.
        gloo::AllreduceOptions opts(ctx_);
        opts.setOutput(ptr, count);
        opts.setReduceFunction(func3<T>(op));
        opts.setTag(next_tag());
        opts.setTimeout(timeout_);
        gloo::allreduce(opts);
        return;
      }
      gloo::ReduceOptions opts(ctx_);
      opts.setOutput(ptr, count);
      opts.setReduceFunction(func3<T>(op));
      opts.setRoot(root);
      opts.setTag(next_tag());
      opts.setTimeout(timeout_);
      gloo::reduce(opts);
    });
  });
}

void Comm::all_gather(rust::Slice<const uint8_t> input, rust::Slice<uint8_t> output,
                      uint32_t tag) {
  guarded("gloo all_gather", [&] {
    gloo::AllgatherOptions opts(ctx_);
    opts.setInput(const_cast<uint8_t*>(input.data()), input.size());
    opts.setOutput(output.data(), output.size());
    opts.setTag(next_tag());
    opts.setTimeout(timeout_);
    gloo::allgather(opts);
  });
}

void Comm::all_to_all(rust::Slice<const uint8_t> input, rust::Slice<uint8_t> output,
                      uint32_t tag) {
  guarded("gloo all_to_all", [&] {
    gloo::AlltoallOptions opts(ctx_);
    opts.setInput(const_cast<uint8_t*>(input.data()), input.size());
    opts.setOutput(output.data(), output.size());
    opts.setTag(next_tag());
    opts.setTimeout(timeout_);
    gloo::alltoall(opts);
  });
}

void Comm::gather(rust::Slice<const uint8_t> input, rust::Slice<uint8_t> output, int32_t root,
                  uint32_t tag) {
  guarded("gloo gather", [&] {
    gloo::GatherOptions opts(ctx_);
    opts.setInput(const_cast<uint8_t*>(input.data()), input.size());
    if (ctx_->rank == root) {
      opts.setOutput(output.data(), output.size());
    }
    opts.setRoot(root);
    opts.setTag(next_tag());
    opts.setTimeout(timeout_);
    gloo::gather(opts);
  });
}

void Comm::scatter(rust::Slice<const uint8_t> input, rust::Slice<uint8_t> output, int32_t root,
                   uint32_t tag) {
  guarded("gloo scatter", [&] {
    gloo::ScatterOptions opts(ctx_);
    if (ctx_->rank == root) {
      std::vector<uint8_t*> blocks;
      for (int r = 0; r < ctx_->size; r++) {
        blocks.push_back(const_cast<uint8_t*>(input.data()) + r * output.size());
      }
      opts.setInputs(blocks, output.size());
    }
    opts.setOutput(output.data(), output.size());
    opts.setRoot(root);
    opts.setTag(next_tag());
    opts.setTimeout(timeout_);
    gloo::scatter(opts);
  });
}

void Comm::barrier(uint32_t tag) {
  guarded("gloo barrier", [&] {
    gloo::BarrierOptions opts(ctx_);
    opts.setTag(next_tag());
    opts.setTimeout(timeout_);
    gloo::barrier(opts);
  });
}

void Comm::send(rust::Slice<const uint8_t> buf, int32_t peer) {
  guarded("gloo send", [&] {
    auto ub = ctx_->createUnboundBuffer(const_cast<uint8_t*>(buf.data()), buf.size());
    ub->send(peer, kP2PSlot);
    if (!ub->waitSend(timeout_)) {
      throw std::runtime_error("send aborted");
    }
  });
}

void Comm::recv(rust::Slice<uint8_t> buf, int32_t peer) {
  guarded("gloo recv", [&] {
    auto ub = ctx_->createUnboundBuffer(buf.data(), buf.size());
    ub->recv(peer, kP2PSlot);
    if (!ub->waitRecv(timeout_)) {
      throw std::runtime_error("recv aborted");
    }
  });
}

}  // namespace ringside_gloo
