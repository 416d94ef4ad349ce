// The C++ side of trainers' autograd shim: what tch 0.24 does not bind.
//
// * Ready hooks: a post-hook on each parameter's gradient accumulator (the
//   AccumulateGrad node), as PyTorch's DDP Reducer registers, so that Rust
//   learns that a parameter's .grad is final while backward still runs.
// * Op counter: a thread-local RecordFunction callback counting dispatched ops
//   and executed autograd nodes, the CPU proxy for a step's launch count.
// * add_(other, alpha): one fused kernel for the optimizer's `a += alpha * b`
//   (tch 0.24's add has no alpha).
// * Kineto profiler: what torch.profiler.profile runs (host ops, and on CUDA
//   the device's kernels and copies through CUPTI), saved as a Chrome trace.
//
// A plain C interface (no cxx bridge: its proc-macro and build crates would
// change the build graph's features and rebuild torch-sys). No exception
// crosses it: each entry point catches and writes the message into `err`.
// One translation unit on purpose: each file that includes libtorch's autograd
// headers takes a minute or more to compile.
#include <ATen/record_function.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/csrc/autograd/variable.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using ReadyFn = void (*)(void* ctx, size_t index);

void write_error(const char* what, char* err, size_t len) {
  if (err != nullptr && len > 0) {
    std::strncpy(err, what, len - 1);
    err[len - 1] = '\0';
  }
}

// Runs `f` and returns its result; an exception (none may cross the C
// interface) is written into `err` and `failed` returned instead.
template <class R, class F>
R guarded(R failed, char* err, size_t err_len, F&& f) {
  try {
    return f();
  } catch (const std::exception& e) {
    write_error(e.what(), err, err_len);
  } catch (...) {
    write_error("unknown C++ exception", err, err_len);
  }
  return failed;
}

// Runs after AccumulateGrad has written the parameter's .grad: tells Rust which
// parameter (its index in the list hooked) is ready. Returns the outputs as
// they are.
class ReadyHook : public torch::autograd::FunctionPostHook {
 public:
  ReadyHook(ReadyFn fn, void* ctx, size_t index) : fn_(fn), ctx_(ctx), index_(index) {}

  torch::autograd::variable_list operator()(
      const torch::autograd::variable_list& outputs,
      const torch::autograd::variable_list& /*inputs*/) override {
    fn_(ctx_, index_);
    return outputs;
  }

 private:
  ReadyFn fn_;
  void* ctx_;
  size_t index_;
};

struct ReadyHooks {
  // Held so that each parameter keeps this accumulator (a variable holds only a
  // weak pointer to it; a new one would carry no hook).
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;
  std::vector<uintptr_t> keys;

  ~ReadyHooks() {
    for (size_t i = 0; i < keys.size(); ++i) {
      accumulators[i]->del_post_hook(keys[i]);
    }
  }
};

// Counted per thread: the counter is a thread-local callback, and CPU backward
// runs on the thread that called it.
thread_local uint64_t tl_ops = 0;
thread_local uint64_t tl_nodes = 0;

std::unique_ptr<at::ObserverContext> count_start(const at::RecordFunction& fn) {
  if (fn.scope() == at::RecordScope::BACKWARD_FUNCTION) {
    ++tl_nodes;
  } else {
    ++tl_ops;
  }
  return nullptr;
}

struct OpCounter {
  at::CallbackHandle handle;
  uint64_t ops0;
  uint64_t nodes0;
};

}  // namespace

extern "C" {

// Hooks `n` tensors (each an at::Tensor*, a leaf that requires grad); hook i
// calls fn(ctx, i). Null (and `err` filled) on failure, with nothing hooked.
void* ringside_ready_hooks(const void* const* tensors, size_t n, ReadyFn fn, void* ctx,
                           char* err, size_t err_len) {
  return guarded<void*>(nullptr, err, err_len, [&]() -> void* {
    auto hooks = std::make_unique<ReadyHooks>();
    // Validate all before hooking any, so an error leaves no hook behind.
    for (size_t i = 0; i < n; ++i) {
      const auto* t = static_cast<const at::Tensor*>(tensors[i]);
      if (t == nullptr || !t->defined()) {
        throw std::invalid_argument("parameter " + std::to_string(i) + " is undefined");
      }
      if (!t->is_leaf() || !t->requires_grad()) {
        throw std::invalid_argument("parameter " + std::to_string(i) +
                                    " is not a leaf that requires grad");
      }
      auto acc = torch::autograd::impl::grad_accumulator(*t);
      if (!acc) {
        throw std::invalid_argument("parameter " + std::to_string(i) +
                                    " has no gradient accumulator");
      }
      hooks->accumulators.push_back(std::move(acc));
    }
    for (size_t i = 0; i < n; ++i) {
      hooks->keys.push_back(
          hooks->accumulators[i]->add_post_hook(std::make_unique<ReadyHook>(fn, ctx, i)));
    }
    return hooks.release();
  });
}

// a.add_(b, alpha) outside autograd, as torch.optim.SGD does it: one kernel
// (a fused multiply-add on AVX2/AVX-512 CPUs and on CUDA), PyTorch's own
// rounding. Returns 0, or -1 with `err` filled.
int ringside_add_scaled_(void* a, const void* b, double alpha, char* err, size_t err_len) {
  return guarded<int>(-1, err, err_len, [&]() -> int {
    at::NoGradGuard no_grad;
    static_cast<at::Tensor*>(a)->add_(*static_cast<const at::Tensor*>(b), alpha);
    return 0;
  });
}

// Removes the hooks; no call of theirs follows.
void ringside_ready_hooks_free(void* hooks) {
  try {
    delete static_cast<ReadyHooks*>(hooks);
  } catch (...) {
  }
}

void* ringside_op_counter_new(char* err, size_t err_len) {
  return guarded<void*>(nullptr, err, err_len, [&]() -> void* {
    auto handle = at::addThreadLocalCallback(
        at::RecordFunctionCallback(&count_start)
            .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}));
    return new OpCounter{handle, tl_ops, tl_nodes};
  });
}

uint64_t ringside_op_counter_ops(const void* c) {
  return tl_ops - static_cast<const OpCounter*>(c)->ops0;
}

uint64_t ringside_op_counter_nodes(const void* c) {
  return tl_nodes - static_cast<const OpCounter*>(c)->nodes0;
}

void ringside_op_counter_free(void* c) {
  try {
    auto* counter = static_cast<OpCounter*>(c);
    at::removeCallback(counter->handle);
    delete counter;
  } catch (...) {
  }
}

// Starts libtorch's Kineto profiler on the calling thread (autograd's device
// threads inherit it, as under torch.profiler.profile): host ops always, the
// device's kernels and copies too when `cuda` is non-zero. Returns 0, or -1
// with `err` filled (e.g. a profiler already running).
int ringside_profiler_start(int cuda, char* err, size_t err_len) {
  return guarded<int>(-1, err, err_len, [&]() -> int {
    using torch::profiler::impl::ActivityType;
    // libtorch would start a second one over the first and lose its record.
    if (torch::profiler::impl::profilerEnabled()) {
      throw std::runtime_error("a profiler is already running on this thread");
    }
    torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO);
    std::set<ActivityType> activities{ActivityType::CPU};
    if (cuda != 0) {
      activities.insert(ActivityType::CUDA);
    } else if (std::getenv("KINETO_LOG_LEVEL") == nullptr) {
      // Kineto looks for GPUs at start-up whatever it records and, on a host
      // without one, logs "ERROR: gpuGetDeviceCount failed": noise for a host
      // profile. Its errors are level 4; a level above them silences it (set
      // before Kineto starts, which is here; a user's own setting wins).
      setenv("KINETO_LOG_LEVEL", "5", 0);
    }
    torch::autograd::profiler::prepareProfiler(config, activities);
    torch::autograd::profiler::enableProfiler(config, activities);
    return 0;
  });
}

// Stops the profiler started on this thread and, if `path` is not null, saves
// what it recorded there as a Chrome trace. Returns 0, or -1 with `err` filled.
int ringside_profiler_stop(const char* path, char* err, size_t err_len) {
  return guarded<int>(-1, err, err_len, [&]() -> int {
    auto result = torch::autograd::profiler::disableProfiler();
    if (path != nullptr && result) {
      result->save(path);
    }
    return 0;
  });
}

}  // extern "C"
