// The next K/V tile's cache lines as a stream a tile loop issues a few at
// a time (KvLineStream).  Its own header, free of the kernels' other
// pieces, so that a unit test can walk it.
#pragma once

#include <cstdint>

namespace fa::FA_KERNEL_NS {

// The next K/V tile's cache lines, fetched a few at a time from inside this
// tile's three long phases (Q·Kᵀ, softmax, P·V each issue a third of them,
// a share per block or row step) instead of all at the tile's start: two
// thousand prefetches in a row wait on the core's fill buffers just as the
// loads they replace would, while spread over the compute their latency hides
// behind it.  Into L2 (a tile is larger than L1): K rows first, then V.
// The pair path always streams them; the vector paths' tile loop with
// FA_ENABLE_ASYNC (its two products issue half each); the row path with
// FA_ENABLE_ASYNC issues all of them at once, into L1 (load_kv_tile).
struct KvLineStream {
  const char* base[2] = {nullptr, nullptr};  // K, V
  std::int64_t stride[2] = {0, 0};           // row strides in bytes
  int rows = 0, lines_per_row = 0;
  // A tile over two blocks of a paged cache: rows from `split` on start at
  // second[part] (row split's), not where the first block's rows lead.
  const char* second[2] = {nullptr, nullptr};
  int split = 1 << 30;
  int part = 2, row = 0;  // the next run's part (2 = done) and first row
  // Tile loops that issue this stream in turn (run_tiles_together's heads
  // side by side): each step's share is divided among them.
  int sharers = 1;
  // The current run of lines, [at, end): a row, or all of a part's rows
  // where they lie end to end (BNSD), so issuing a line is a compare, the
  // prefetch and an add (decoding issues eight a key at head_dim 128).
  const char* at = nullptr;
  const char* end = nullptr;

  int total_lines() const { return 2 * rows * lines_per_row; }
  // Row r of part p (0: K, 1: V).
  const char* row_at(int p, int r) const {
    return r < split ? base[p] + r * stride[p] : second[p] + (r - split) * stride[p];
  }
  // Lines per step for a phase of `steps` steps that carries 1 / `phases`.
  int per_step(int steps, int phases) const {
    const int parts = phases * steps * sharers;
    return (total_lines() + parts - 1) / parts;
  }
  int third_per_step(int steps) const { return per_step(steps, 3); }
  template <int kLocality = 2>
  void issue(int n) {
    for_next(n, [](const char* line) { __builtin_prefetch(line, 0, kLocality); });
  }
  // visit(line) for each of the next n lines (fewer where the tile ends).
  template <class Visit>
  void for_next(int n, Visit&& visit) {
    for (; n > 0; --n) {
      if (at == end && !next_run()) return;
      visit(at);
      at += 64;
    }
  }

 private:
  // Moves [at, end) to the next run; false when every line was issued.
  bool next_run() {
    for (; part < 2; ++part, row = 0) {
      if (row < rows) {
        const std::int64_t bytes = std::int64_t(lines_per_row) * 64;
        const int run_end = row < split && split < rows ? split : rows;
        const int n = stride[part] == bytes ? run_end - row : 1;
        at = row_at(part, row);
        end = at + n * bytes;
        row += n;
        return true;
      }
    }
    return false;
  }
};

}  // namespace fa::FA_KERNEL_NS
