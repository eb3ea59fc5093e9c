#include "host_tensor.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <new>

#include "../../flash_attention/common/dtype_convert.h"
#include "cli_args.h"

namespace fa::cli {

namespace {
bool huge_page_buffers = false;
}

void set_huge_page_buffers(bool on) { huge_page_buffers = on; }

void HostBuffer::Free::operator()(void* p) const { std::free(p); }

HostBuffer::HostBuffer(std::size_t bytes) : bytes_(bytes) {
  void* p = fa::allocate_tensor_memory(bytes, huge_page_buffers);
  if (!p) throw std::bad_alloc();
  data_.reset(p);
}

std::uint64_t NormalRng::next_bits() {  // splitmix64
  std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double NormalRng::next_uniform() { return static_cast<double>(next_bits() >> 11) * 0x1.0p-53; }

// Marsaglia's polar method: a point drawn uniformly in the unit disc gives
// two independent normals for one log and one square root.  Box-Muller's
// sine and cosine cost as much again, and the test suites draw every input
// from here (under the sanitizers a quarter of their time went to them).
double NormalRng::next() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  double x, y, r2;
  do {
    x = 2.0 * next_uniform() - 1.0;
    y = 2.0 * next_uniform() - 1.0;
    r2 = x * x + y * y;
  } while (r2 >= 1.0 || r2 == 0.0);
  const double f = std::sqrt(-2.0 * std::log(r2) / r2);
  spare_ = y * f;
  has_spare_ = true;
  return x * f;
}

void fill_normal(void* data, DType dtype, std::int64_t count, std::uint64_t seed, double scale) {
  NormalRng rng(seed);
  for (std::int64_t i = 0; i < count; ++i) {
    detail::store_from_f32(data, dtype, i, static_cast<float>(rng.next() * scale));
  }
}

HostBuffer read_exact(const std::string& path, std::size_t bytes, const std::string& flag,
                      const std::string& what) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) {
    throw UsageError("--" + flag + ": cannot open '" + path + "': " + std::strerror(errno));
  }
  const std::streamoff size = in.tellg();
  if (size < 0 || static_cast<std::size_t>(size) != bytes) {
    throw UsageError("--" + flag + ": '" + path + "' has " + std::to_string(size) +
                     " bytes, expected " + std::to_string(bytes) + " for " + what);
  }
  HostBuffer buf(bytes);
  in.seekg(0);
  if (!in.read(static_cast<char*>(buf.data()), static_cast<std::streamsize>(bytes))) {
    throw UsageError("--" + flag + ": could not read " + std::to_string(bytes) + " bytes from '" + path + "'");
  }
  return buf;
}

void check_destination(const std::string& path, const std::string& flag) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    if (S_ISDIR(st.st_mode)) throw UsageError("--" + flag + ": '" + path + "' is a directory (expected a file path)");
    return;  // /dev/null, a pipe: written in place
  }
  const std::size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    throw UsageError("--" + flag + ": cannot write '" + path + "': directory '" + dir + "' does not exist");
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    throw UsageError("--" + flag + ": cannot write '" + path + "': directory '" + dir + "' is not writable");
  }
}

void write_atomic(const std::string& path, const void* data, std::size_t bytes, const std::string& flag) {
  struct stat st;
  const bool exists = ::stat(path.c_str(), &st) == 0;
  if (exists && !S_ISREG(st.st_mode)) {  // /dev/null, a pipe, a terminal: nothing to leave behind
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) throw UsageError("--" + flag + ": cannot open '" + path + "': " + std::strerror(errno));
    const bool ok = std::fwrite(data, 1, bytes, f) == bytes;
    if (std::fclose(f) != 0 || !ok) throw UsageError("--" + flag + ": write to '" + path + "' failed");
    return;
  }
  std::string tmp = path + ".partial.XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) {
    throw UsageError("--" + flag + ": cannot create a file beside '" + path + "': " + std::strerror(errno));
  }
  const char* p = static_cast<const char*>(data);
  std::size_t left = bytes;
  bool ok = true;
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      ok = false;
      break;
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  if (::fchmod(fd, 0644) != 0) ok = false;
  if (::close(fd) != 0) ok = false;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string reason = std::strerror(errno);
    std::remove(tmp.c_str());
    throw UsageError("--" + flag + ": could not write '" + path + "': " + reason);
  }
}

std::size_t available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  std::size_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit) {
    if (key == "MemAvailable:") return kb * 1024;
  }
  return 0;
}

void check_fits_in_memory(std::size_t bytes, const std::string& what) {
  const std::size_t avail = available_memory_bytes();
  if (avail != 0 && bytes > avail) {
    throw UsageError(what + " needs " + std::to_string(bytes >> 20) + " MB but only " +
                     std::to_string(avail >> 20) + " MB of memory is available; use a smaller shape");
  }
}

std::size_t checked_product(std::initializer_list<std::int64_t> factors, const std::string& what) {
  std::size_t total = 1;
  for (std::int64_t f : factors) {
    if (f < 0) throw UsageError(what + ": negative size");
    if (f != 0 && total > std::numeric_limits<std::size_t>::max() / static_cast<std::size_t>(f)) {
      throw UsageError(what + ": size overflows 64 bits; use a smaller shape");
    }
    total *= static_cast<std::size_t>(f);
  }
  return total;
}

double half_ulp(DType dtype, double m) {
  const int mantissa = dtype == DType::kF32 ? 23 : dtype == DType::kF16 ? 10 : 7;
  const int min_exp = dtype == DType::kF16 ? -14 : -126;
  const int e = m > 0 ? std::max(std::ilogb(m), min_exp) : min_exp;
  return std::ldexp(0.5, e - mantissa);
}

}  // namespace fa::cli
