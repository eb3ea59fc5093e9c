// The AMX tile unit's costs one instruction mix at a time (amx_tile_probe).
#pragma once

#include <string>
#include <vector>

namespace fa::bench {

struct TileTiming {
  std::string what;
  double cycles;  // TSC cycles per operation (the `per` column says which)
  std::string per;
};

// Every mix, `reps` repetitions each; needs AMX-TILE, AMX-BF16 and AVX-512
// (and the operating system's permission for the tile registers).
std::vector<TileTiming> time_tile_mixes(long reps);

}  // namespace fa::bench
