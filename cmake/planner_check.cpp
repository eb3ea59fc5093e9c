// Configure-time tile check: the planner's own arithmetic and the target
// table (flash_attention/common/targets.h), run by CMake's try_run.
// argv: target tile_q tile_kv head_dim q_tiles_per_thread (2 when FA3 is
// built: its two Q tiles' state).  Prints the verdict; exit 1 = exceeds.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "targets.h"

int main(int argc, char** argv) {
  if (argc != 6) return 2;
  const fa::detail::TargetInfo* target = fa::detail::find_target(argv[1]);
  if (!target) return 2;
  const int tq = std::atoi(argv[2]), tkv = std::atoi(argv[3]), d = std::atoi(argv[4]), states = std::atoi(argv[5]);
  // P also kept in bf16 pairs: on the tile unit the largest working set is
  // fp16's (two pieces), with VDPBF16PS bf16's (one).
  const int p_bytes = std::strcmp(target->name, "amx") == 0 ? 4 : std::strcmp(target->name, "avx512bf16") == 0 ? 2 : 0;
  auto working_set = [&](int q, int kv) { return fa::detail::version_working_set_bytes(states, q, kv, d, p_bytes); };
  const char* fa3 = states > 1 ? " (FA3: two Q tiles per thread)" : "";
  const std::size_t used = working_set(tq, tkv);
  const std::size_t limit = target->l2_bytes;
  if (used <= limit) {
    std::printf("fits: L2 working set %zu KiB per thread (limit: %zu KiB, %s)\n", used / 1024, limit / 1024, target->name);
    return 0;
  }
  int fit = tq;
  while (fit > 16 && working_set(fit, tkv) > limit) fit /= 2;
  std::printf("Error: Resource usage exceeds device limit.\n"
              "  L2 working set: %zu KiB per thread for FA_TILE_Q=%d FA_TILE_KV=%d at head_dim %d%s (limit: %zu KiB per core, %s)\n"
              "  Suggestion: FA_TILE_Q=%d%s\n",
              used / 1024, tq, tkv, d, fa3, limit / 1024, target->name, fit,
              working_set(fit, tkv) <= limit ? "" : " and a smaller FA_TILE_KV");
  return 1;
}
