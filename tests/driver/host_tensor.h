// Host buffers, deterministic random inputs, and file I/O for the drivers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "flash_attention/flash_attention.h"

namespace fa::cli {

// A 64-byte aligned, owned byte buffer; on transparent huge pages once
// set_huge_page_buffers(true) was called (2 MiB and larger buffers).
class HostBuffer {
 public:
  HostBuffer() = default;
  explicit HostBuffer(std::size_t bytes);
  void* data() { return data_.get(); }
  const void* data() const { return data_.get(); }
  std::size_t bytes() const { return bytes_; }

 private:
  struct Free {
    void operator()(void* p) const;
  };
  std::unique_ptr<void, Free> data_;
  std::size_t bytes_ = 0;
};

// Whether HostBuffers allocated from now on ask for transparent huge pages
// (fa::allocate_tensor_memory): fa2_benchmark --huge-pages.
void set_huge_page_buffers(bool on);

// Counter-based normal random numbers: the same seed gives the same data on
// every machine and standard library.
class NormalRng {
 public:
  explicit NormalRng(std::uint64_t seed) : state_(seed) {}
  double next();          // standard normal
  double next_uniform();  // [0, 1)

 private:
  std::uint64_t next_bits();
  std::uint64_t state_;
  bool has_spare_ = false;
  double spare_ = 0.0;
};

// Fills `count` elements of `dtype` with normal(0, 1) * scale, rounded to dtype.
void fill_normal(void* data, DType dtype, std::int64_t count, std::uint64_t seed, double scale);

// Reads a file that must hold exactly `bytes` bytes.  Errors (missing file,
// wrong size) throw UsageError naming `flag` and `what` the size corresponds to.
HostBuffer read_exact(const std::string& path, std::size_t bytes, const std::string& flag,
                      const std::string& what);

// Writes `bytes` to `path` without ever leaving a partial file: data goes to a
// temporary file beside it, renamed over `path` when complete.  Paths that are
// not regular files (/dev/null) are written directly.  Throws UsageError.
void write_atomic(const std::string& path, const void* data, std::size_t bytes, const std::string& flag);
// Throws UsageError (naming --flag) when `path` could not be written: its
// directory missing or read-only, or `path` a directory.  Checked before a
// run, so a run never ends with some of its files written and others not.
void check_destination(const std::string& path, const std::string& flag);

// MemAvailable from /proc/meminfo, or 0 when unknown.
std::size_t available_memory_bytes();

// Throws UsageError when `bytes` exceed the memory available right now.
void check_fits_in_memory(std::size_t bytes, const std::string& what);

// Product with overflow detection; throws UsageError naming `what`.
std::size_t checked_product(std::initializer_list<std::int64_t> factors, const std::string& what);

// Half a unit in the last place of `dtype` (fp32, fp16 or bf16) at
// magnitude m, the subnormal step below the normal range: the most a
// correctly rounded result may be off by.
double half_ulp(DType dtype, double m);

}  // namespace fa::cli
