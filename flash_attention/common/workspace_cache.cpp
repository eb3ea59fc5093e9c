#include "workspace_cache.h"

#include "flash_attention/flash_attention.h"

#include <sys/mman.h>

#include <cstdlib>
#include <fstream>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace fa::detail {

constexpr std::size_t kHugePage = std::size_t{2} << 20;
// Idle blocks kept: a call takes at most two (scratch, shared K/V packing),
// so a program alternating between two shapes keeps all it needs.
constexpr std::size_t kMaxIdleBlocks = 4;

struct IdleBlock {
  void* data;
  std::size_t capacity;
};

struct WorkspaceCache {
  std::mutex mutex;
  std::vector<IdleBlock> idle;
};

WorkspaceCache& workspace_cache() {
  // Never destroyed: blocks may be released during static destruction.  Its
  // list's room is reserved up front, so returning a block never allocates.
  static WorkspaceCache* c = [] {
    auto* cache = new WorkspaceCache;
    cache->idle.reserve(kMaxIdleBlocks + 1);
    return cache;
  }();
  return *c;
}

void* allocate_block(std::size_t* capacity, bool huge_pages = true) {
  const bool huge = huge_pages && *capacity >= kHugePage;
  const std::size_t align = huge ? kHugePage : 64;
  *capacity = (*capacity + align - 1) / align * align;
  void* p = std::aligned_alloc(align, *capacity);
#if defined(MADV_HUGEPAGE)
  if (p && huge) madvise(p, *capacity, MADV_HUGEPAGE);  // advice only: ignored where unsupported
#endif
  return p;
}

WorkspaceBlock::WorkspaceBlock(std::size_t bytes) {
  if (bytes == 0) bytes = 64;
  WorkspaceCache& c = workspace_cache();
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    std::size_t best = c.idle.size();
    for (std::size_t i = 0; i < c.idle.size(); ++i) {  // the smallest idle block that fits
      if (c.idle[i].capacity >= bytes && (best == c.idle.size() || c.idle[i].capacity < c.idle[best].capacity)) best = i;
    }
    if (best < c.idle.size()) {
      data_ = c.idle[best].data;
      capacity_ = c.idle[best].capacity;
      c.idle.erase(c.idle.begin() + static_cast<std::ptrdiff_t>(best));
      return;
    }
  }
  capacity_ = bytes;
  data_ = allocate_block(&capacity_);
  if (!data_) capacity_ = 0;
}

WorkspaceBlock::~WorkspaceBlock() {
  if (!data_) return;
  WorkspaceCache& c = workspace_cache();
  void* drop = nullptr;
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    c.idle.push_back({data_, capacity_});
    if (c.idle.size() > kMaxIdleBlocks) {  // the smallest goes
      std::size_t smallest = 0;
      for (std::size_t i = 1; i < c.idle.size(); ++i) {
        if (c.idle[i].capacity < c.idle[smallest].capacity) smallest = i;
      }
      drop = c.idle[smallest].data;
      c.idle.erase(c.idle.begin() + static_cast<std::ptrdiff_t>(smallest));
    }
  }
  std::free(drop);
}

WorkspaceBlock::WorkspaceBlock(WorkspaceBlock&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), capacity_(std::exchange(other.capacity_, 0)) {}

WorkspaceBlock& WorkspaceBlock::operator=(WorkspaceBlock&& other) noexcept {
  if (this != &other) {
    WorkspaceBlock old(std::move(*this));
    data_ = std::exchange(other.data_, nullptr);
    capacity_ = std::exchange(other.capacity_, 0);
  }
  return *this;
}

}  // namespace fa::detail

namespace fa {

std::size_t cached_workspace_bytes() {
  detail::WorkspaceCache& c = detail::workspace_cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  std::size_t total = 0;
  for (const detail::IdleBlock& b : c.idle) total += b.capacity;
  return total;
}

void release_cached_workspace() {
  detail::WorkspaceCache& c = detail::workspace_cache();
  std::vector<detail::IdleBlock> idle;
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    idle.swap(c.idle);
  }
  for (const detail::IdleBlock& b : idle) std::free(b.data);
}

void* allocate_tensor_memory(std::size_t bytes, bool huge_pages) {
  std::size_t capacity = bytes > 0 ? bytes : 64;
  return detail::allocate_block(&capacity, huge_pages);
}

std::string transparent_huge_pages() {
  // "always [madvise] never": the policy in force is the bracketed one.
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  if (!std::getline(in, line)) return "";
  const std::size_t open = line.find('['), close = line.find(']');
  return open != std::string::npos && close > open ? line.substr(open + 1, close - open - 1) : "";
}

}  // namespace fa
