// What the running CPU and operating system can execute, read once through
// CPUID and XGETBV, and the Linux permission request AMX tiles need.
#pragma once

#include <string>

#include "flash_attention/flash_attention.h"

namespace fa::detail {

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512_vnni = false, avx512_vbmi = false, avx512_bf16 = false, avx512_fp16 = false;
  bool amx_tile = false, amx_bf16 = false, amx_int8 = false;
  // Operating-system state saving (XCR0): vector registers usable at all.
  bool os_avx = false, os_avx512 = false, os_amx = false;
  bool amd = false;  // vendor "AuthenticAMD"

  bool has_avx2_path() const { return os_avx && avx2 && fma && f16c; }
  bool has_avx512_path() const {
    return has_avx2_path() && os_avx512 && avx512f && avx512bw && avx512vl && avx512dq;
  }
  // AVX512_VNNI and AVX512_VBMI beside AVX512_BF16: the row path's int8-cache
  // products are VPDPWSSD there, and an FP8 cache is widened to bf16 through
  // VPERMI2B byte tables.  Every CPU with AVX512_BF16 has VNNI; all but Intel's
  // Cooper Lake have VBMI (Zen 4, Sapphire Rapids and later), and on Cooper
  // Lake the automatic choice never took this path (bf16_dot_outpaces_fma).
  bool has_avx512bf16_path() const { return has_avx512_path() && avx512_vnni && avx512_vbmi && avx512_bf16; }
  // Whether VDPBF16PS outpaces the FMA loop, so the automatic choice may
  // take the avx512bf16 path: on AMD Zen 4 it does twice an FMA's work at
  // the FMA's rate (measured, docs/PERF.md); on Intel cores it runs at half
  // the FMA's flop rate (reported for Sapphire Rapids: ~122 against ~245 GFLOP/s a core),
  // so there the avx512 path is faster and avx512bf16 is only taken when
  // asked for (--isa, FA_ISA).
  bool bf16_dot_outpaces_fma() const { return has_avx512bf16_path() && amd; }
  // AMX-INT8 too (an int8 cache's Q·Kᵀ): every CPU with AMX-BF16 has it
  // (Sapphire Rapids and later).
  bool has_amx_path() const {
    return has_avx512bf16_path() && avx512_fp16 && os_amx && amx_tile && amx_bf16 && amx_int8;
  }
  // Whether the CPU and OS run the instructions of `isa`'s path (AMX's
  // tile permission aside: see request_amx_permission).
  bool has_path(Isa isa) const {
    switch (isa) {
      case Isa::kGeneric: return true;
      case Isa::kAvx2: return has_avx2_path();
      case Isa::kAvx512: return has_avx512_path();
      case Isa::kAvx512Bf16: return has_avx512bf16_path();
      case Isa::kAmx: return has_amx_path();
    }
    return false;
  }
};

const CpuFeatures& cpu_features();

// "avx2 fma f16c avx512f ..." for messages.
std::string cpu_feature_list();

// Asks Linux for the AMX tile-data permission (once); false when refused or
// not on Linux.  Must succeed before the first tile instruction.
bool request_amx_permission();

}  // namespace fa::detail
