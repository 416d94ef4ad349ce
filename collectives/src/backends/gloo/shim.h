// The C++ side of ringside's Gloo backend: one `Comm` wraps a connected
// gloo::rendezvous::Context and runs Gloo's collectives on raw byte slices.
// Every entry point catches whatever Gloo throws and rethrows it as a
// std::exception, which the cxx bridge turns into a Rust `Err`.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include "rust/cxx.h"

namespace gloo {
class Context;
}

namespace ringside_gloo {

struct Kv;

class Comm {
 public:
  Comm(std::shared_ptr<gloo::Context> ctx, std::shared_ptr<gloo::Context> classic_ctx,
       std::chrono::milliseconds timeout);
  ~Comm();

  void all_reduce(rust::Slice<uint8_t> buf, uint8_t dtype, uint8_t op, uint8_t algo,
                  uint64_t segment_bytes, uint32_t tag);
  void broadcast(rust::Slice<uint8_t> buf, int32_t root, uint32_t tag);
  void reduce(rust::Slice<uint8_t> buf, uint8_t dtype, uint8_t op, int32_t root, uint32_t tag);
  void all_gather(rust::Slice<const uint8_t> input, rust::Slice<uint8_t> output, uint32_t tag);
  void all_to_all(rust::Slice<const uint8_t> input, rust::Slice<uint8_t> output, uint32_t tag);
  void gather(rust::Slice<const uint8_t> input, rust::Slice<uint8_t> output, int32_t root,
              uint32_t tag);
  void scatter(rust::Slice<const uint8_t> input, rust::Slice<uint8_t> output, int32_t root,
               uint32_t tag);
  void barrier(uint32_t tag);
  void send(rust::Slice<const uint8_t> buf, int32_t peer);
  void recv(rust::Slice<uint8_t> buf, int32_t peer);

 private:
  struct Classic;
  void classic_barrier();
  uint32_t next_tag() { return ++tag_; }
  // At most this many classic algorithm objects (and work buffers) are kept.
  static constexpr size_t kMaxClassic = 16;
  std::shared_ptr<gloo::Context> ctx_;
  // Only for the classic all_reduce objects (null when none is in use).
  std::shared_ptr<gloo::Context> classic_ctx_;
  std::chrono::milliseconds timeout_;
  std::map<std::tuple<uint8_t, uint8_t, uint8_t, uint64_t>, std::unique_ptr<Classic>> classic_;
  uint64_t uses_ = 0;
  uint32_t tag_ = 0;
};

std::unique_ptr<Comm> connect(const Kv& kv, int32_t rank, int32_t size, rust::Str iface,
                              rust::Str hostname, int64_t timeout_ms, bool classic);

}  // namespace ringside_gloo
