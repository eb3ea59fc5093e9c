// The automatic choice of kernel path: the fastest the build has and the CPU
// runs, where avx512bf16 ranks above avx512 only on CPUs whose VDPBF16PS
// outpaces the FMA loop (AMD); on Intel cores it runs at half the FMA's flop
// rate, so there avx512 stays the automatic choice.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "common/cpu_features.h"
#include "common/elementwise_paths.h"
#include "flash_attention/flash_attention.h"

namespace {

fa::detail::CpuFeatures avx512_cpu(bool amd, bool bf16) {
  fa::detail::CpuFeatures f;
  f.avx2 = f.fma = f.f16c = true;
  f.avx512f = f.avx512bw = f.avx512vl = f.avx512dq = true;
  f.os_avx = f.os_avx512 = true;
  f.avx512_vnni = f.avx512_vbmi = f.avx512_bf16 = bf16;  // Zen 4 and Sapphire Rapids have all three
  f.amd = amd;
  return f;
}

TEST(IsaChoice, Bf16DotRanksFirstOnlyWhereItOutpacesTheFma) {
  EXPECT_TRUE(avx512_cpu(/*amd=*/true, /*bf16=*/true).bf16_dot_outpaces_fma());    // Zen 4
  EXPECT_FALSE(avx512_cpu(/*amd=*/false, /*bf16=*/true).bf16_dot_outpaces_fma());  // Cooper Lake, Sapphire Rapids
  EXPECT_FALSE(avx512_cpu(/*amd=*/true, /*bf16=*/false).bf16_dot_outpaces_fma());  // no AVX512-BF16
  fa::detail::CpuFeatures no_os_state = avx512_cpu(true, true);
  no_os_state.os_avx512 = false;  // the OS does not save the ZMM registers
  EXPECT_FALSE(no_os_state.bf16_dot_outpaces_fma());
  fa::detail::CpuFeatures no_vnni = avx512_cpu(true, true);
  no_vnni.avx512_vnni = false;  // the path's int8-cache products are VPDPWSSD
  EXPECT_FALSE(no_vnni.has_avx512bf16_path());
  fa::detail::CpuFeatures cooper_lake = avx512_cpu(false, true);
  cooper_lake.avx512_vbmi = false;  // an FP8 cache's widening is VPERMI2B
  EXPECT_FALSE(cooper_lake.has_avx512bf16_path());
}

TEST(IsaChoice, AutomaticChoiceOnThisCpu) {
  const char* forced = std::getenv("FA_ISA");
  const std::optional<std::string> saved = forced ? std::optional<std::string>(forced) : std::nullopt;
  unsetenv("FA_ISA");
  fa::Isa chosen;
  const fa::Status s = fa::select_isa(fa::AttentionParams{}, &chosen);
  if (saved) setenv("FA_ISA", saved->c_str(), 1);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(fa::isa_available(chosen));
  // The fastest available, in the documented order.
  fa::Isa expected = fa::Isa::kGeneric;
  if (fa::isa_available(fa::Isa::kAmx) && !FA_AMX_EMULATION) {  // emulated tiles: never chosen automatically
    expected = fa::Isa::kAmx;
  } else if (fa::isa_available(fa::Isa::kAvx512Bf16) && fa::detail::cpu_features().bf16_dot_outpaces_fma()) {
    expected = fa::Isa::kAvx512Bf16;
  } else if (fa::isa_available(fa::Isa::kAvx512)) {
    expected = fa::Isa::kAvx512;
  } else if (fa::isa_available(fa::Isa::kAvx2)) {
    expected = fa::Isa::kAvx2;
  } else if (!fa::isa_available(fa::Isa::kGeneric)) {
    expected = chosen;  // a build of one path the ranking skipped (avx512bf16 alone on Intel, emulated amx)
  }
  EXPECT_EQ(fa::isa_name(chosen), fa::isa_name(expected));
}

// The bandwidth probe the benchmark's Bandwidth line divides by: a positive
// rate on every path this CPU runs, 0 (not a crash) on one it cannot.  No
// figure is checked: unit tests never time.
TEST(Probes, ReadBandwidthOnEveryPath) {
  for (fa::Isa isa : {fa::Isa::kGeneric, fa::Isa::kAvx2, fa::Isa::kAvx512, fa::Isa::kAvx512Bf16, fa::Isa::kAmx}) {
    const double gbps = fa::measure_read_bandwidth_gbps(isa, 2, std::size_t{1} << 20, 0.005);
    if (fa::isa_available(isa)) {
      EXPECT_GT(gbps, 0.0) << fa::isa_name(isa);
    } else {
      EXPECT_EQ(gbps, 0.0) << fa::isa_name(isa);
    }
  }
}

TEST(Probes, CacheSizesAreOrdered) {
  const std::size_t l2 = fa::cpu_l2_bytes(), llc = fa::cpu_last_level_cache_bytes();
  if (l2 == 0 || llc == 0) GTEST_SKIP() << "sysfs lists no cache sizes here";
  EXPECT_GE(llc, l2);
}

// The element-wise operators' cache size counts the CPUs sharing it
// (sysfs lists) to cap a virtual machine's view of its host's whole L3.
TEST(Probes, CpuListsCounted) {
  EXPECT_EQ(fa::detail::cpu_list_count("0-1"), 2);
  EXPECT_EQ(fa::detail::cpu_list_count("0-7,64-71"), 16);
  EXPECT_EQ(fa::detail::cpu_list_count("3"), 1);
  EXPECT_EQ(fa::detail::cpu_list_count("0,2,4-5"), 4);
  EXPECT_EQ(fa::detail::cpu_list_count(""), 0);
  EXPECT_EQ(fa::detail::cpu_list_count("x"), 0);
}

}  // namespace
