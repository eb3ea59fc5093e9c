// amx_tile_probe: what the AMX tile unit's instructions cost on this CPU,
// one mix at a time, in TSC cycles per operation: TDPBF16PS on registers
// (the peak the benchmark's utilization is a share of), 1 KiB tile loads
// from L1, L2 and memory (strides, alignment, TILELOADDT1, huge pages),
// tile stores, the two products' blocks as the amx path runs them, and
// whether the tile unit works while the vector units do.  The figures fix
// the amx path's blocking (docs/PERF.md).  Exit 0 with "SKIP" on a CPU or
// system without AMX.
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <x86intrin.h>

#include "driver/cli_args.h"
#include "tile_timings.h"

namespace {

bool cpu_has_amx() {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool tile = d & (1u << 24), bf16 = d & (1u << 22), avx512f = b & (1u << 16);
  return tile && bf16 && avx512f;
}

double tsc_ghz() {
  const auto t0 = std::chrono::steady_clock::now();
  const unsigned long long c0 = __rdtsc();
  while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(200)) {
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return double(__rdtsc() - c0) / s / 1e9;
}

int run(int argc, char** argv) {
  using K = fa::cli::FlagKind;
  fa::cli::Args args("amx_tile_probe", {{"reps", K::kInt, "N", "repetitions of each mix (default 200000)"},
                                        {"help", K::kBool, "", "print this help"}});
  args.parse(argc, argv);
  if (args.flag("help")) {
    std::cout << "The AMX tile unit's instruction costs on this CPU, in TSC cycles\n" << args.help_text();
    return 0;
  }
  const long reps = static_cast<long>(args.integer("reps", 200000, 1, 1L << 40));
  if (!cpu_has_amx()) {
    std::puts("SKIP: this CPU has no AMX-TILE and AMX-BF16");
    return 0;
  }
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) {
    std::puts("SKIP: the operating system refused the AMX tile registers (arch_prctl ARCH_REQ_XCOMP_PERM)");
    return 0;
  }
  const double ghz = tsc_ghz();
  const auto timings = fa::bench::time_tile_mixes(reps);
  const double tdp = timings.front().cycles;
  std::printf("amx_tile_probe: TSC %.2f GHz, %ld repetitions a mix\n", ghz, reps);
  std::printf("%-72s %9s %8s  %s\n", "mix", "TSC cyc", "ns", "per (x TDPBF16PS on registers)");
  for (const auto& t : timings) {
    std::printf("%-72s %9.2f %8.2f  %s (%.2fx)\n", t.what.c_str(), t.cycles, t.cycles / ghz, t.per.c_str(), t.cycles / tdp);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return fa::cli::run_guarded(run, argc, argv); }
