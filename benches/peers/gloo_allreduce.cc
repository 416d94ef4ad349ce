// gloo_allreduce.cc: the Gloo side of ringside's peer benchmark.
//
// Sweeps a Gloo float-sum all_reduce over message sizes on Gloo's TCP
// transport (127.0.0.1) and prints one JSON line per size on rank 0. The
// timing rule is shared with mpi_allreduce.c and ringside's `sweep`
// subcommand (see benches/README.md):
//
//   per size: fill, W warm-up iterations, then N iterations of
//   { barrier; t0; allreduce; t1; times[i] = t1 - t0 } on the same buffer.
//   times are reduced with MAX across ranks (the slowest rank per
//   iteration); min/median/max are taken over those per-iteration maxima.
//   Then one more all_reduce on fresh input is checked element by element.
//
// Rank and world come from RANK / WORLD_SIZE (torchrun's names). Rendezvous
// goes through gloo::rendezvous::FileStore in the directory given by -S,
// scoped by a PrefixStore (-p) so reruns in the same directory do not mix.
//
// Flags: -b MINBYTES -e MAXBYTES -f FACTOR -n ITERS -w WARMUP
//        -S STORE_DIR [-p PREFIX] [-a ring|ring_chunked|halving_doubling|allreduce]
//        [-t TIMEOUT_SECONDS]
// Sizes accept K/M/G suffixes (powers of 1024).
#include <getopt.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "gloo/algorithm.h"
#include "gloo/allreduce.h"
#include "gloo/allreduce_halving_doubling.h"
#include "gloo/allreduce_ring.h"
#include "gloo/allreduce_ring_chunked.h"
#include "gloo/barrier.h"
#include "gloo/barrier_all_to_all.h"
#include "gloo/math.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/file_store.h"
#include "gloo/rendezvous/prefix_store.h"
#include "gloo/transport/tcp/device.h"

namespace {

bool parse_size(const char* s, unsigned long long* out) {
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(s, &end, 10);
  if (errno != 0 || end == s) return false;
  unsigned long long mult = 1;
  if (*end == 'K' || *end == 'k') mult = 1ULL << 10, end++;
  else if (*end == 'M' || *end == 'm') mult = 1ULL << 20, end++;
  else if (*end == 'G' || *end == 'g') mult = 1ULL << 30, end++;
  if (*end == 'B' || *end == 'b') end++;
  if (*end != '\0') return false;
  *out = v * mult;
  return true;
}

bool parse_env_int(const char* name, int* out) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return false;
  char* end = nullptr;
  errno = 0;
  long x = std::strtol(v, &end, 10);
  if (errno != 0 || *end != '\0' || x < 0 || x > 1 << 20) return false;
  *out = static_cast<int>(x);
  return true;
}

// Small integers, so the float sum is exact: (rank + i) mod 7, the same
// input ringside's bench uses.
void fill(float* buf, size_t count, int rank) {
  for (size_t i = 0; i < count; i++) {
    buf[i] = static_cast<float>((static_cast<size_t>(rank) + i) % 7);
  }
}

// Counts elements that differ from sum over ranks r of (r + i) mod 7.
double count_wrong(const float* buf, size_t count, int world) {
  float expected[7];
  for (size_t k = 0; k < 7; k++) {
    size_t sum = 0;
    for (int r = 0; r < world; r++) sum += (static_cast<size_t>(r) + k) % 7;
    expected[k] = static_cast<float>(sum);
  }
  double wrong = 0;
  for (size_t i = 0; i < count; i++) {
    if (buf[i] != expected[i % 7]) wrong += 1;
  }
  return wrong;
}

// One all_reduce flavour, built once per size so the timed loop measures
// the collective, not buffer registration (that is how a training loop
// that reuses its gradient buffers would use Gloo's algorithm classes).
class Runner {
 public:
  virtual ~Runner() = default;
  virtual void run() = 0;
};

template <typename Algo>
class AlgoRunner : public Runner {
 public:
  explicit AlgoRunner(std::unique_ptr<Algo> algo) : algo_(std::move(algo)) {}
  void run() override { algo_->run(); }

 private:
  std::unique_ptr<Algo> algo_;
};

// A tag per call, as PyTorch's ProcessGroupGloo and ringside's backend both
// do (the options-style collectives match messages by tag).
uint32_t next_tag() {
  static uint32_t tag = 0;
  return ++tag;
}

// gloo::allreduce with AllreduceOptions: the entry point PyTorch's
// ProcessGroupGloo uses for dense CPU tensors, and what ringside's Gloo
// backend calls for `--algo ring`.
class OptionsRunner : public Runner {
 public:
  OptionsRunner(const std::shared_ptr<gloo::Context>& ctx, float* buf, size_t count,
                std::chrono::milliseconds timeout)
      : ctx_(ctx), buf_(buf), count_(count), timeout_(timeout) {}
  void run() override {
    gloo::AllreduceOptions opts(ctx_);
    opts.setOutput(buf_, count_);
    opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
    opts.setReduceFunction(
        static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
    opts.setTag(next_tag());
    opts.setTimeout(timeout_);
    gloo::allreduce(opts);
  }

 private:
  std::shared_ptr<gloo::Context> ctx_;
  float* buf_;
  size_t count_;
  std::chrono::milliseconds timeout_;
};

// The barrier before each timed call and the two reductions of the results.
// Gloo's classic algorithm objects and its options-style collectives must not
// share a context: mixed, the options-style all_reduce ran 10-300x slower
// (measured), which is why an earlier version of this peer made Gloo look far
// slower than ringside calling the very same function. So the options flavour
// gets options-style bookkeeping, and the classic flavours classic ones.
class Sync {
 public:
  Sync(const std::shared_ptr<gloo::Context>& ctx, bool options, std::vector<double>* times,
       std::vector<double>* wrong, std::chrono::milliseconds timeout)
      : ctx_(ctx), options_(options), times_(times), wrong_(wrong), timeout_(timeout) {
    if (!options_) {
      barrier_ = std::make_unique<gloo::BarrierAllToAll>(ctx);
      max_times_ = std::make_unique<gloo::AllreduceRing<double>>(
          ctx, std::vector<double*>{times->data()}, static_cast<int>(times->size()),
          gloo::ReductionFunction<double>::max);
      sum_wrong_ = std::make_unique<gloo::AllreduceRing<double>>(
          ctx, std::vector<double*>{wrong->data()}, 1, gloo::ReductionFunction<double>::sum);
    }
  }
  void barrier() {
    if (!options_) return barrier_->run();
    gloo::BarrierOptions opts(ctx_);
    opts.setTag(next_tag());
    opts.setTimeout(timeout_);
    gloo::barrier(opts);
  }
  void max_times() {
    if (!options_) return max_times_->run();
    reduce(times_, static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::max<double>));
  }
  void sum_wrong() {
    if (!options_) return sum_wrong_->run();
    reduce(wrong_, static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<double>));
  }

 private:
  void reduce(std::vector<double>* v, void (*fn)(void*, const void*, const void*, size_t)) {
    gloo::AllreduceOptions opts(ctx_);
    opts.setOutput(v->data(), v->size());
    opts.setReduceFunction(fn);
    opts.setTag(next_tag());
    opts.setTimeout(timeout_);
    gloo::allreduce(opts);
  }
  std::shared_ptr<gloo::Context> ctx_;
  bool options_;
  std::vector<double>* times_;
  std::vector<double>* wrong_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<gloo::BarrierAllToAll> barrier_;
  std::unique_ptr<gloo::AllreduceRing<double>> max_times_;
  std::unique_ptr<gloo::AllreduceRing<double>> sum_wrong_;
};

std::unique_ptr<Runner> make_runner(const std::string& algo,
                                    const std::shared_ptr<gloo::Context>& ctx, float* buf,
                                    int count, std::chrono::milliseconds timeout) {
  std::vector<float*> ptrs{buf};
  if (algo == "ring") {
    return std::make_unique<AlgoRunner<gloo::AllreduceRing<float>>>(
        std::make_unique<gloo::AllreduceRing<float>>(ctx, ptrs, count));
  }
  if (algo == "ring_chunked") {
    return std::make_unique<AlgoRunner<gloo::AllreduceRingChunked<float>>>(
        std::make_unique<gloo::AllreduceRingChunked<float>>(ctx, ptrs, count));
  }
  if (algo == "halving_doubling") {
    return std::make_unique<AlgoRunner<gloo::AllreduceHalvingDoubling<float>>>(
        std::make_unique<gloo::AllreduceHalvingDoubling<float>>(ctx, ptrs, count));
  }
  return std::make_unique<OptionsRunner>(ctx, buf, static_cast<size_t>(count), timeout);
}

std::string impl_name(const std::string& algo) {
  std::string name = "gloo-" + algo;
  std::replace(name.begin(), name.end(), '_', '-');
  return name;
}

void usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: RANK=r WORLD_SIZE=n %s -S STORE_DIR [-p PREFIX]\n"
               "       [-a ring|ring_chunked|halving_doubling|allreduce] [-t TIMEOUT_S]\n"
               "       [-b MINBYTES] [-e MAXBYTES] [-f FACTOR] [-n ITERS] [-w WARMUP]\n"
               "  sizes take K/M/G suffixes (powers of 1024); defaults -b 8 -e 64M -f 2 -n 50 "
               "-w 5 -a ring -p ringside -t 120\n",
               argv0);
}

int real_main(int argc, char** argv) {
  unsigned long long min_bytes = 8, max_bytes = 64ULL << 20;
  long factor = 2, iters = 50, warmup = 5, timeout_s = 120;
  std::string store_dir, prefix = "ringside", algo = "ring";
  int opt;
  while ((opt = getopt(argc, argv, "b:e:f:n:w:S:p:a:t:h")) != -1) {
    switch (opt) {
      case 'b':
        if (!parse_size(optarg, &min_bytes)) return usage(argv[0]), 2;
        break;
      case 'e':
        if (!parse_size(optarg, &max_bytes)) return usage(argv[0]), 2;
        break;
      case 'f': factor = std::strtol(optarg, nullptr, 10); break;
      case 'n': iters = std::strtol(optarg, nullptr, 10); break;
      case 'w': warmup = std::strtol(optarg, nullptr, 10); break;
      case 'S': store_dir = optarg; break;
      case 'p': prefix = optarg; break;
      case 'a': algo = optarg; break;
      case 't': timeout_s = std::strtol(optarg, nullptr, 10); break;
      case 'h': usage(argv[0]); return 0;
      default: usage(argv[0]); return 2;
    }
  }
  if (min_bytes < 4) min_bytes = 4;  // at least one float, as ringside does
  if (factor < 2 || iters < 1 || warmup < 0 || timeout_s < 1 || min_bytes < 1 ||
      max_bytes < min_bytes || max_bytes / sizeof(float) > 0x7fffffffULL) {
    std::fprintf(stderr,
                 "bad flags: need -f >= 2, -n >= 1, -w >= 0, -t >= 1, 1 <= -b <= -e < 8 GiB\n");
    return 2;
  }
  if (algo != "ring" && algo != "ring_chunked" && algo != "halving_doubling" &&
      algo != "allreduce") {
    std::fprintf(stderr, "unknown -a %s\n", algo.c_str());
    return 2;
  }
  if (store_dir.empty()) {
    std::fprintf(stderr, "-S STORE_DIR is required (a directory all ranks can see)\n");
    return 2;
  }
  int rank = 0, world = 0;
  if (!parse_env_int("RANK", &rank) || !parse_env_int("WORLD_SIZE", &world) || world < 1 ||
      rank >= world) {
    std::fprintf(stderr, "set RANK and WORLD_SIZE (0 <= RANK < WORLD_SIZE)\n");
    return 2;
  }

  gloo::transport::tcp::attr attr("127.0.0.1");
  auto dev = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore file_store(store_dir);
  gloo::rendezvous::PrefixStore store(prefix, file_store);
  auto rctx = std::make_shared<gloo::rendezvous::Context>(rank, world);
  // Every wait inside Gloo (connect, recv) gives up after this long.
  rctx->setTimeout(std::chrono::seconds(timeout_s));
  rctx->connectFullMesh(store, dev);
  std::shared_ptr<gloo::Context> ctx = rctx;

  size_t max_count = static_cast<size_t>(max_bytes / sizeof(float));
  std::vector<float> buf(std::max<size_t>(max_count, 1));
  std::vector<double> times(static_cast<size_t>(iters));
  std::vector<double> wrong(1);
  const auto timeout = std::chrono::milliseconds(timeout_s * 1000);
  Sync sync(ctx, algo == "allreduce", &times, &wrong, timeout);
  const std::string name = impl_name(algo);
  // Gloo's classic algorithms send through Pair::send, which sets SO_SNDBUF
  // to the size of the largest message the pair has sent so far. That turns
  // off the kernel's send-buffer autotuning, and at the first message just
  // above one loopback segment (64 KiB and its preamble) it cost ~44 ms per
  // call, waiting for a delayed ACK: a stall that depended on which sizes
  // the sweep had already run, not on the algorithm (measured: gone when
  // the setsockopt is suppressed). One all_reduce of the largest size before
  // the sweep sizes the buffers once, as in a job that has already sent its
  // largest gradient, so every size meets the same sockets.
  if (algo != "allreduce") {
    size_t count = static_cast<size_t>(max_bytes / sizeof(float));
    fill(buf.data(), count, rank);
    make_runner(algo, ctx, buf.data(), static_cast<int>(count), timeout)->run();
  }

  for (unsigned long long bytes = min_bytes; bytes <= max_bytes;
       bytes *= static_cast<unsigned long long>(factor)) {
    // Like nccl-tests: the element count rounds down; report the bytes moved.
    size_t count = static_cast<size_t>(bytes / sizeof(float));
    if (count > 0) {
      auto runner = make_runner(algo, ctx, buf.data(), static_cast<int>(count), timeout);
      fill(buf.data(), count, rank);
      for (long i = 0; i < warmup; i++) {
        runner->run();
      }
      for (long i = 0; i < iters; i++) {
        sync.barrier();
        auto t0 = std::chrono::steady_clock::now();
        runner->run();
        auto t1 = std::chrono::steady_clock::now();
        times[static_cast<size_t>(i)] = std::chrono::duration<double>(t1 - t0).count();
      }
      sync.max_times();
      // The timed runs summed in place repeatedly; check one run on fresh input.
      fill(buf.data(), count, rank);
      runner->run();
      wrong[0] = count_wrong(buf.data(), count, world);
      sync.sum_wrong();

      if (rank == 0) {
        std::vector<double> slowest(times);
        std::sort(slowest.begin(), slowest.end());
        size_t n = slowest.size();
        double median = (n % 2 == 1) ? slowest[n / 2] : 0.5 * (slowest[n / 2 - 1] + slowest[n / 2]);
        size_t moved = count * sizeof(float);
        double algbw = static_cast<double>(moved) / median / 1e9;
        double busbw = algbw * 2.0 * static_cast<double>(world - 1) / static_cast<double>(world);
        std::printf(
            "{\"impl\":\"%s\",\"collective\":\"all_reduce\",\"world\":%d,\"bytes\":%zu,"
            "\"dtype\":\"float\",\"iters\":%ld,\"min_us\":%.3f,\"median_us\":%.3f,"
            "\"max_us\":%.3f,\"algbw_gbps\":%.6g,\"busbw_gbps\":%.6g,\"wrong\":%.0f}\n",
            name.c_str(), world, moved, iters, slowest.front() * 1e6, median * 1e6,
            slowest.back() * 1e6, algbw, busbw, wrong[0]);
        std::fflush(stdout);
      }
    }
    if (bytes > max_bytes / static_cast<unsigned long long>(factor)) break;  // no overflow
  }
  // Nobody leaves while a peer may still be reading from it.
  sync.barrier();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return real_main(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gloo_allreduce: %s\n", e.what());
    return 1;
  }
}
