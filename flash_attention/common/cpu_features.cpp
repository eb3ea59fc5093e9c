#include "cpu_features.h"

#include <cpuid.h>

#include <mutex>

#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace fa::detail {
namespace {

std::uint64_t read_xcr0() {
  std::uint32_t eax = 0, edx = 0;
  // xgetbv with ecx = 0; written as bytes so no -mxsave flag is needed.
  __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<std::uint64_t>(edx) << 32) | eax;
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned a, b, c, d;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return f;
  f.amd = b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u;  // "Auth" "enti" "cAMD"
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  f.fma = c & (1u << 12);
  f.f16c = c & (1u << 29);
  const bool osxsave = c & (1u << 27);
  const bool avx = c & (1u << 28);
  if (osxsave && avx) {
    const std::uint64_t xcr0 = read_xcr0();
    f.os_avx = (xcr0 & 0x6) == 0x6;                  // SSE and AVX state
    f.os_avx512 = f.os_avx && (xcr0 & 0xe0) == 0xe0;  // opmask, ZMM_Hi256, Hi16_ZMM
    f.os_amx = (xcr0 & 0x60000) == 0x60000;           // XTILECFG, XTILEDATA
  }
  if (__get_cpuid_max(0, nullptr) >= 7) {
    __cpuid_count(7, 0, a, b, c, d);
    f.avx2 = b & (1u << 5);
    f.avx512f = b & (1u << 16);
    f.avx512dq = b & (1u << 17);
    f.avx512bw = b & (1u << 30);
    f.avx512vl = b & (1u << 31);
    f.avx512_vbmi = c & (1u << 1);
    f.avx512_vnni = c & (1u << 11);
    f.avx512_fp16 = d & (1u << 23);
    f.amx_bf16 = d & (1u << 22);
    f.amx_tile = d & (1u << 24);
    f.amx_int8 = d & (1u << 25);
    __cpuid_count(7, 1, a, b, c, d);
    f.avx512_bf16 = a & (1u << 5);
  }
  return f;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

std::string cpu_feature_list() {
  const CpuFeatures& f = cpu_features();
  std::string out;
  auto add = [&](bool has, const char* name) {
    if (!has) return;
    if (!out.empty()) out += ' ';
    out += name;
  };
  add(f.avx2 && f.os_avx, "avx2");
  add(f.fma && f.os_avx, "fma");
  add(f.f16c && f.os_avx, "f16c");
  add(f.avx512f && f.os_avx512, "avx512f");
  add(f.avx512bw && f.os_avx512, "avx512bw");
  add(f.avx512vl && f.os_avx512, "avx512vl");
  add(f.avx512dq && f.os_avx512, "avx512dq");
  add(f.avx512_vbmi && f.os_avx512, "avx512-vbmi");
  add(f.avx512_vnni && f.os_avx512, "avx512-vnni");
  add(f.avx512_bf16 && f.os_avx512, "avx512-bf16");
  add(f.avx512_fp16 && f.os_avx512, "avx512-fp16");
  add(f.amx_tile && f.os_amx, "amx-tile");
  add(f.amx_bf16 && f.os_amx, "amx-bf16");
  add(f.amx_int8 && f.os_amx, "amx-int8");
  return out.empty() ? "baseline x86-64 only" : out;
}

bool request_amx_permission() {
#if defined(__linux__)
  static std::once_flag once;
  static bool granted = false;
  std::call_once(once, [] {
    constexpr long kArchReqXcompPerm = 0x1023;
    constexpr long kXfeatureXtiledata = 18;
    granted = syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  });
  return granted;
#else
  return false;
#endif
}

}  // namespace fa::detail
