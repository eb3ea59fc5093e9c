// Workspace memory reused from one operator call to the next.
//
// A call's scratch (per-thread tiles, split-KV partials, the amx path's
// shared K/V packing) runs from megabytes to hundreds of megabytes.  Freshly
// allocated each call, every page of it faults on the kernels' first touch
// (on the amx path at B1 S4096 H16 D128 that was about a tenth of the call).
// Released blocks are kept, the largest few, and handed to the next call
// they fit; blocks of 2 MiB and more are 2 MiB aligned and asked to be backed
// by huge pages (fewer faults and TLB misses on the K/V tiles).
#pragma once

#include <cstddef>

namespace fa::detail {

// A block of at least the bytes asked for, 64-byte aligned, returned to the
// cache when destroyed.  Empty (false) when the memory could not be had.
class WorkspaceBlock {
 public:
  WorkspaceBlock() = default;
  explicit WorkspaceBlock(std::size_t bytes);
  ~WorkspaceBlock();
  WorkspaceBlock(WorkspaceBlock&& other) noexcept;
  WorkspaceBlock& operator=(WorkspaceBlock&& other) noexcept;
  WorkspaceBlock(const WorkspaceBlock&) = delete;
  WorkspaceBlock& operator=(const WorkspaceBlock&) = delete;

  void* get() const { return data_; }
  explicit operator bool() const { return data_ != nullptr; }

 private:
  void* data_ = nullptr;
  std::size_t capacity_ = 0;
};

// cached_workspace_bytes() and release_cached_workspace() (the public API)
// report and free the idle blocks.

}  // namespace fa::detail
