// The tile planner: resolves auto tiles (tuning cache, else the target's
// table) and checks every plan's working set against the per-core L2 budget
// (the CPU's own when readable, else the target's default).  Also the tuning
// cache file.
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <fstream>
#include <vector>
#include <map>
#include <mutex>
#include <sstream>
#include <span>
#include <string>

#include "flash_attention/flash_attention.h"
#include "common/elementwise_paths.h"
#include "../kernels/kernel_table.h"
#include "mask.h"
#include "targets.h"
#include "tile_config.h"

namespace fa {
namespace detail {

// FA_MAX_THREADS: a cap on the cores one call uses (the guide's
// ASCEND_VISIBILITY_BHU_LIMIT), 0 when unset or invalid
// (the backward dispatcher applies it too).
int max_threads_from_env() {
  const char* v = std::getenv("FA_MAX_THREADS");
  if (!v || !*v) return 0;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return (*end == '\0' && n > 0 && n <= kMaxThreads) ? static_cast<int>(n) : 0;
}

Status select_isa(const std::optional<Isa>& forced, Isa* chosen);
Status validate_params(const AttentionParams& p);
}

namespace {

// The longest queries (rows a head) whose GQA groups share one tile
// (TilePlan::pack_tile): beyond, a head's own tiles fill their lanes.
constexpr std::int64_t kPackTileMaxRows = 32;
// Where the tile unit reads K/V rows in place, a group of longer queries
// shares one tile too while the group's rows fill at most one 256-row tile
// (kPackRowsTileMaxRows): GQA 32/8 at 64 queries then reads K/V once where
// each head's own tile read a packed copy (0.80-0.88x the time); at 512 rows
// a group takes two such tiles, each reading K/V anew, and the packed copy
// shared by every head's tiles is level (64/8 at 64 queries) or faster
// (0.85-0.92x at 128 queries; Xeon with AMX, docs/PERF.md).
constexpr std::int64_t kPackRowsTileMaxRows = 256;
// Where the tile unit reads bf16 K/V rows in place, 2 to 64 queries of one
// head with no group take its tile too, each head's rows alone (and in
// BSH every K/V head's tile walked together, as a group's): 8 heads, 32768
// keys, BNSD 0.67x the time at 4 queries (the row path) and 0.72-0.89x at
// 8-16 (a tile per head over each K/V tile packed), BSH 0.55-0.67x at 4 to
// 32; level at 64 in BNSD (BSH 0.75x) and at 128 (Xeon with AMX,
// docs/PERF.md).
constexpr std::int64_t kPackRowsTileNoGroupMaxRows = 64;
// fp16 on the tile unit (two bf16 pieces) packs its K/V tile by tile either
// way; a group of up to 512 rows in packed tiles packs each K/V tile once
// for the group where the heads' own tiles each read a packed copy of the
// whole K/V: 32/8 at 64 queries 0.58-0.64x the time, 64/8 at 64 0.71-0.75x,
// 16/8 and 32/8 at 128 0.79-0.89x; at 1024 rows level (Xeon with AMX).  So
// does fp16 Q over an int8 or FP8 cache, whose tiles (packed or a head's
// own) run the FMA loop: 32/8 and 64/8 at 64 queries 0.81-0.95x the time.
constexpr std::int64_t kPackPiecesMaxRows = 512;
// The row path's K/V tile (decoding) where the K/V heads' rows lie side by
// side: the tile's rows of all of them at most this many bytes, a few L1
// data caches (see plan()).
constexpr std::size_t kSideBySideRowTileBytes = 128 * 1024;

std::size_t parse_cache_size(const std::string& text) {
  std::size_t value = 0;
  std::size_t i = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') value = value * 10 + (text[i++] - '0');
  if (i < text.size() && (text[i] == 'K' || text[i] == 'k')) value *= 1024;
  if (i < text.size() && (text[i] == 'M' || text[i] == 'm')) value *= 1024 * 1024;
  return value;
}

std::string kib(std::size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f KiB", double(bytes) / 1024.0);
  return buf;
}

int bucket(std::int64_t n) {  // shape class: the power of two at or above n, at least 16
  std::int64_t b = 16;
  while (b < n && b < (std::int64_t{1} << 40)) b <<= 1;
  return static_cast<int>(b > (1 << 30) ? (1 << 30) : b);
}

std::string cache_key(Version version, const AttentionParams& p, DType dtype, Isa isa) {
  std::ostringstream key;
  key << version_name(version) << ' ' << isa_name(isa) << ' ' << dtype_name(dtype) << " d" << p.head_dim << " c"
      << (detail::key_window(p).active ? 1 : 0)
      << " q" << bucket(p.seq_q) << " kv" << bucket(p.seq_kv);
  return key.str();
}

struct CacheEntry {
  int tile_q, tile_kv;
  double tflops;
};

struct TuningCache {
  std::mutex mutex;
  bool loaded = false;
  std::string path;
  std::map<std::string, CacheEntry> entries;

  // Lines: <key fields...> = <tile_q> <tile_kv> <tflops>; '#' starts a comment.
  void load_locked() {
    if (loaded && path == tuning_cache_path()) return;
    loaded = true;
    path = tuning_cache_path();
    entries.clear();
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      const auto eq = line.find(" = ");
      if (eq == std::string::npos) continue;
      std::istringstream values(line.substr(eq + 3));
      CacheEntry e{};
      if (values >> e.tile_q >> e.tile_kv >> e.tflops) entries[line.substr(0, eq)] = e;
    }
  }
};

TuningCache& cache() {
  static TuningCache c;
  return c;
}

bool valid_tile(int t) { return t >= 16 && t <= 512 && (t & (t - 1)) == 0; }


// Hands the items of one call (or one sequence) to the thread that frees up
// first, in the kernel's order (longest first: the last Q tiles), adding
// their costs to `busy` and `total`.  An item holds `per_item` Q tiles (FA2:
// 1, FA3: 2, FA1: all); its cost = the K/V tiles its Q tiles visit, plus
// each one's epilogue.
void add_items(const AttentionParams& p, int tq, int tkv, std::int64_t q_tiles, std::int64_t per_item, int splits,
               std::int64_t split_keys, int pack, std::vector<double>& busy, double& total) {
  const detail::KeyWindow window = detail::key_window(p);
  for (std::int64_t group = (q_tiles + per_item - 1) / per_item - 1; group >= 0; --group) {
    for (int s = 0; s < splits; ++s) {
      double cost = 0.0;
      for (std::int64_t qt = group * per_item; qt < std::min((group + 1) * per_item, q_tiles); ++qt) {
        const std::int64_t last_row = std::min<std::int64_t>((qt + 1) * tq, p.seq_q) - 1;
        const std::int64_t kv_begin = detail::window_begin(window, qt * tq, p.seq_kv) / tkv * tkv;
        const std::int64_t kv_end = detail::window_end(window, last_row, p.seq_kv);
        const std::int64_t lo = std::max(kv_begin, s * split_keys), hi = std::min(kv_end, (s + 1) * split_keys);
        const std::int64_t keys = hi > lo ? hi - lo : 0;
        cost += (double((keys + tkv - 1) / tkv) + 0.05) * pack;  // + the per-tile epilogue
      }
      // The group's units (items of one cost) go to the least busy threads:
      // whole rounds of one each first, then the rest one at a time.  The
      // greedy's own choice while the threads' loads differ by less than one
      // item, as longest-first order keeps them; and a call of millions of
      // items plans in time proportional to its Q tiles.
      std::int64_t units = p.batch * p.num_heads / pack;
      total += cost * double(units);
      const std::int64_t rounds = units / std::int64_t(busy.size());
      if (rounds > 0) {
        for (double& b : busy) b += cost * double(rounds);
        units -= rounds * std::int64_t(busy.size());
      }
      for (; units > 0; --units) *std::min_element(busy.begin(), busy.end()) += cost;
    }
  }
}

double simulate_occupancy(const AttentionParams& p, int tq, int tkv, std::int64_t q_tiles, std::int64_t per_item,
                          int splits, std::int64_t split_keys, int pack, int threads) {
  std::vector<double> busy(static_cast<std::size_t>(threads), 0.0);
  double total = 0.0;
  add_items(p, tq, tkv, q_tiles, per_item, splits, split_keys, pack, busy, total);
  const double longest = *std::max_element(busy.begin(), busy.end());
  return longest > 0 ? total / (double(threads) * longest) : 1.0;
}

}  // namespace

namespace {

// The size of cpu0's cache of `level` (sysfs), or with level 0 that of its
// highest level; 0 when none is listed.
std::size_t cpu_cache_bytes(int level) {
  int best_level = 0;
  std::size_t best = 0;
  for (int index = 0; index < 8; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
    std::ifstream lv_file(dir + "level"), size(dir + "size");
    int lv = 0;
    std::string sz;
    if (!(lv_file >> lv) || !(size >> sz)) continue;
    if (level > 0 && lv == level) return parse_cache_size(sz);
    if (level == 0 && lv > best_level) best_level = lv, best = parse_cache_size(sz);
  }
  return best;
}

}  // namespace

// Read once a process: the planner asks on every call, and the sysfs opens
// took a 16-key decoding step from about 8 us to 60 (Zen 4).
std::size_t cpu_l2_bytes() {
  static const std::size_t bytes = cpu_cache_bytes(2);
  return bytes;
}
std::size_t cpu_last_level_cache_bytes() {
  static const std::size_t bytes = cpu_cache_bytes(0);
  return bytes;
}
std::size_t cpu_cache_share_bytes() { return detail::last_level_cache_bytes(); }

std::string tuning_cache_path() {
  if (const char* p = std::getenv("FA_TUNING_CACHE"); p && *p) return p;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/flash_attention/tuning_cache.txt";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/flash_attention/tuning_cache.txt";
  return "flash_attention_tuning_cache.txt";
}

bool tuning_cache_lookup(Version version, const AttentionParams& p, DType dtype, Isa isa, int* tile_q, int* tile_kv) {
  TuningCache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.load_locked();
  auto it = c.entries.find(cache_key(version, p, dtype, isa));
  if (it == c.entries.end() || !valid_tile(it->second.tile_q) || !valid_tile(it->second.tile_kv)) return false;
  *tile_q = it->second.tile_q;
  *tile_kv = it->second.tile_kv;
  return true;
}

Status tuning_cache_store(Version version, const AttentionParams& p, DType dtype, Isa isa, int tile_q, int tile_kv,
                          double tflops) {
  if (!valid_tile(tile_q) || !valid_tile(tile_kv)) {
    return Status::Invalid("tuning cache: tiles must be powers of two from 16 to 512");
  }
  TuningCache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.load_locked();
  c.entries[cache_key(version, p, dtype, isa)] = {tile_q, tile_kv, tflops};
  // Create the directory chain, then write beside the file and rename.
  const std::string& path = c.path;
  for (std::size_t slash = path.find('/', 1); slash != std::string::npos; slash = path.find('/', slash + 1)) {
    ::mkdir(path.substr(0, slash).c_str(), 0755);
  }
  const std::string tmp = path + ".partial";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << "# FlashAttention tuning cache: <version> <path> <dtype> d<head_dim> c<causal> q<seq_q class> "
           "kv<seq_kv class> = <tile_q> <tile_kv> <TFLOPS measured>\n";
    for (const auto& [key, e] : c.entries) out << key << " = " << e.tile_q << ' ' << e.tile_kv << ' ' << e.tflops << '\n';
    if (!out) {
      std::remove(tmp.c_str());
      return Status::Invalid("tuning cache: cannot write '" + tmp + "'");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return Status::Invalid("tuning cache: cannot replace '" + path + "'");
  }
  return Status::Ok();
}

Status fa2_plan(const AttentionParams& p, DType dtype, TilePlan* plan) { return fa::plan(Version::kFA2, p, dtype, plan); }

Status plan(Version version, const AttentionParams& p, DType dtype, TilePlan* plan) {
  return fa::plan(version, p, dtype, dtype, plan);
}

Status plan(Version version, const AttentionParams& p, DType dtype, DType kv_dtype, TilePlan* plan) {
  // The planner computes with these: refuse what validate() would refuse.
  if (Status s = detail::validate_params(p); !s.ok()) return s;
  if (Status s = version_supports(version, p, dtype); !s.ok()) return s;
  Isa isa;
  if (Status s = detail::select_isa(p.isa, &isa); !s.ok()) return s;
  const detail::TargetInfo* target = detail::find_target(std::string(isa_name(isa)).c_str());
  const std::size_t l2 = cpu_l2_bytes();
  const std::size_t limit = l2 > 0 ? l2 : target->l2_bytes;
  const int D = static_cast<int>(p.head_dim);
  // The pair path (amx tiles, avx512bf16 dot products) keeps P in bf16 pairs
  // too, and each engine has its own recommended tiles.
  const bool matrix = uses_matrix_unit(isa, dtype, p.head_dim);
  const int p_bytes = matrix ? (dtype == DType::kF16 ? 4 : 2) : 0;
  // FA3 holds two Q tiles' state and two K/V tiles per thread, and runs them
  // interleaved, but for the avx512bf16 pair engine, whose products share
  // the softmax's vector pipes: there each Q tile of a pair runs FA2's way
  // (kernels/bf16_dot_path.h, kOwnUnit), so FA3 plans FA2's tiles and items.
  const bool interleaved_pair = version == Version::kFA3 && !(matrix && isa == Isa::kAvx512Bf16);
  const int states = interleaved_pair ? 2 : 1;
  // The pair path holds its tiles at head_dim padded to the engines' 32-dim step.
  const int tile_dims = matrix ? (D + 31) & ~31 : D;
  auto working_set = [&](int q, int kv) { return detail::version_working_set_bytes(states, q, kv, tile_dims, p_bytes); };
  const int want_threads = p.threads > 0 ? p.threads : default_thread_count();
  const std::int64_t group = p.num_heads / p.kv_heads();

  // A call with per-sequence lengths (cu_seqlens, seqlens_kv) runs one job
  // per sequence: its longest query and key counts decide the packing and
  // the chunk bounds.
  const bool per_sequence = detail::per_sequence_call(p);
  std::vector<AttentionParams> sequences;
  std::int64_t longest_q = p.seq_q, longest_kv = p.seq_kv;
  if (per_sequence) {
    sequences.reserve(static_cast<std::size_t>(p.batch));
    longest_q = longest_kv = 0;
    for (std::int64_t b = 0; b < p.batch; ++b) {
      sequences.push_back(detail::sequence_params(p, b));
      longest_q = std::max(longest_q, sequences.back().seq_q);
      longest_kv = std::max(longest_kv, sequences.back().seq_kv);
    }
  }
  // Short queries of GQA groups (5 to 32 rows a head: speculative decoding,
  // chunk tails) on the tile path: one tile holds a K/V head's whole group,
  // head after head, so its lanes fill (8 rows of one head would leave half
  // of a 16-row vector empty) and each K/V tile is read once per group.  A
  // tile_q given (caller, build, tuning cache) is the packed tile's rows and
  // must hold a row of every head.  Shorter queries take the row path, but
  // on the bf16 pair engines with a group of 8 rows or more (decoding at
  // GQA 64/8, two rows at 32/8: 1.3-2.3x the FMA row path on Zen 4,
  // docs/PERF.md), where the cache is not quantized (the pair path does not
  // read one).  Where the row path has VDPBF16PS products (bf16 on the
  // avx512bf16 path, head_dim a multiple of 32) it keeps groups of up to
  // 24 rows (kRowPathPairGroupRows; decoding at 64/8: 1.4-2x the packed
  // tile; 12 to 24 rows 0.55-0.86x its time since the row path's line
  // stream, 32 rows level or 1.1x) and a head with no group up to 24
  // (row_rows: 9 to 24 rows of 8/8 0.5-0.9x the time of the 16- and
  // 32-row tiles, 32 rows level).
  // So does an FP8 cache there, whose tile loops run FMA products on tiles
  // widened to fp32: 5 to 8 query rows 1.7-2.9x faster on the row path
  // (8/8), 1.3-1.5x at 5 rows of 32/8, level at 8; with bf16 Q up to 24
  // rows a head, 0.5-0.9x (Zen 4, docs/PERF.md).  fp16
  // with no group to pack takes the FMA row path up to 8 rows on 16 lanes
  // (kRowPathHalfRows: 0.4-0.6x the time of the half-empty 16-row tile on
  // Zen 4; on the amx path 0.42-0.63x that of the tile of two bf16 pieces),
  // over its own K/V or an int8 or FP8 cache.  On avx2 bf16 and fp16 heads
  // with no group take the FMA row path up to 12 and 8 rows over their own
  // K/V (kRowPathAvx2Bf16Rows: 0.55-0.9x the 16-row tile's time on Zen 3).
  const bool row_dot = detail::row_path_has_pair_products(isa, dtype, kv_dtype, p.head_dim);
  const int row_rows = detail::row_path_max_rows(isa, dtype, kv_dtype, p.head_dim, group);
  // Where the tile unit reads K/V rows in place, a group of 2 to 7 rows
  // takes the packed tile too (GQA 32/8 decoding on a Xeon with AMX: BNSD
  // 0.69-0.98x the row path's time; BSH, with the K/V heads of a batch
  // entry walked together below, 59-63% of the bandwidth against 39-42%,
  // docs/PERF.md); over an int8 cache, 8 rows and more.
  const bool rows_tile = detail::tile_reads_kv_rows(isa, dtype, kv_dtype, p.head_dim);
  // fp16 on the tile unit runs as two bf16 pieces, packed tile by tile (half
  // the time of GQA 64/8 decoding went to that packing): up to 8 rows the
  // FMA row path takes 0.55x its time, at 16 the two are level and at 32 the
  // tile takes 0.67x (BNSD, 32768 keys, Xeon with AMX, docs/PERF.md).  The
  // tile reading rows of pieces (below) is faster, and the row path still
  // takes 0.76-0.82x its time at 8 rows (64/8 decoding, BNSD and BSH).
  const bool fp16_pieces = isa == Isa::kAmx && dtype == DType::kF16;
  // An int8 cache's row path multiplies int16 Q and P with VPDPWSSD: at 4
  // rows (GQA 32/8 decoding) it took 0.7-0.8x the tile's time, at 8 (64/8)
  // 1.2-1.3x (BNSD, 32768 keys, Xeon with AMX, docs/PERF.md).
  const int rows_tile_min = kv_dtype == DType::kI8 ? 8 : 2;
  const int pair_min_rows = rows_tile ? rows_tile_min : row_dot ? detail::kRowPathPairGroupRows + 1 : fp16_pieces ? 9 : 8;
  // fp16 groups of 9 to 32 rows on the tile unit read K/V as rows too, each
  // tile widened into two bf16 pieces a value (detail::fp16_tile_reads_rows;
  // 0.77-0.86x the packed tile's time in BNSD at 16 to 32 rows, 32768 keys):
  // the tile rules below that keep a rows tile's lines in L1 (32 keys: the
  // widened K and V take 1 KiB a key at head_dim 128; 0.89-0.90x the time
  // of the table's 256) and walk a BSH item's K/V heads together (0.58-0.70x
  // the packed tile's time) hold for them.
  const bool fp16_rows_tile = detail::fp16_tile_reads_rows(isa, dtype, kv_dtype, p.head_dim, group, longest_q);
  const bool pair_rows = matrix && (kv_dtype == dtype || rows_tile) && group * longest_q >= pair_min_rows;
  // A quantized cache read as rows (int8 or FP8 with bf16 Q, widened tile by
  // tile) takes the packed tile at any length, with a group or without: its
  // other tile loops run FMA products on tiles widened to fp32 (bf16 Q,
  // 4096 keys, BNSD, Xeon with AMX: 8/8 at 8 queries 0.32x the time, at 256
  // 0.32x; 32/8 at 64 queries 0.23-0.28x; causal prefill of 2048 0.31-0.33x,
  // then 1.6x the bf16 cache's time; docs/PERF.md).
  const bool group_fits_rows_tile = (rows_tile && group * longest_q <= kPackRowsTileMaxRows) ||
                                    (fp16_pieces && group * longest_q <= kPackPiecesMaxRows);
  const bool quantized_rows_tile = rows_tile && kv_dtype != dtype;
  const bool one_head_rows_tile = rows_tile && group == 1 && longest_q <= kPackRowsTileNoGroupMaxRows;
  bool pack_tile = version != Version::kFA1 && (group > 1 || quantized_rows_tile || one_head_rows_tile) &&
                   (longest_q <= kPackTileMaxRows || group_fits_rows_tile || quantized_rows_tile) &&
                   (longest_q > row_rows || pair_rows);
  int tq = p.tile_q != 0 ? p.tile_q : detail::kDefaultTileQ;
  int tkv = p.tile_kv != 0 ? p.tile_kv : detail::kDefaultTileKv;
  bool kv_from_table = false;  // tkv resolved from the target's table (not the caller, build or tuning cache)
  std::string source = (p.tile_q != 0 || p.tile_kv != 0) ? "caller" : "build default";
  if (version == Version::kFA1) {  // fixed (version_supports refused any other request)
    tq = tkv = 64;
    source = "FA1 fixed tiles";
  } else if (tq == kTileAuto || tkv == kTileAuto) {
    int cq = 0, ckv = 0;
    int table_q = 0, table_kv = 0;
    const std::span<const detail::TileRow> table =
        !matrix ? std::span<const detail::TileRow>(detail::kRecommendedTiles)
        : isa == Isa::kAmx ? std::span<const detail::TileRow>(detail::kMatrixUnitTiles)
                           : std::span<const detail::TileRow>(detail::kBf16DotTiles);
    for (const detail::TileRow& row : table) {
      const bool masked = detail::key_window(p).active;  // the causal column serves every window
      if (p.seq_q <= row.max_seq && table_q == 0) table_q = masked ? row.causal_tile_q : row.tile_q;
      if (p.seq_kv <= row.max_seq && table_kv == 0) table_kv = masked ? row.causal_tile_kv : row.tile_kv;
    }
    // FA3's interleaved item is a pair of Q tiles: each half the table's, so
    // the pair covers the rows FA2's tile would.
    if (interleaved_pair && table_q > 16) table_q /= 2;
    // A Q tile longer than the queries only wastes lanes: cap it (decoding;
    // a packed tile holds every head of the group).
    const std::int64_t tile_rows_wanted = pack_tile ? group * longest_q : p.seq_q;
    while (table_q > 16 && table_q / 2 >= tile_rows_wanted) table_q /= 2;
    // Parallelism: halve the Q tile (down to 64) while the items would not
    // give every thread two.
    const std::int64_t per_item = interleaved_pair ? 2 : 1;
    auto items = [&](int q) {
      const std::int64_t step = pack_tile ? std::max<std::int64_t>(q / group, 1) : q;
      const std::int64_t units = pack_tile ? p.kv_heads() : p.num_heads;
      return p.batch * units * (((p.seq_q + step - 1) / step + per_item - 1) / per_item);
    };
    while (table_q > 64 && items(table_q) < 2 * want_threads) table_q /= 2;
    const bool cached = tuning_cache_lookup(version, p, dtype, isa, &cq, &ckv);
    if (tq == kTileAuto) tq = cached ? cq : table_q;
    if (tkv == kTileAuto) {
      tkv = cached ? ckv : table_kv;
      kv_from_table = !cached;
    }
    source = cached ? "tuning cache" : "target table";
    // An automatic plan shrinks until it fits; a requested one is checked.
    while (working_set(tq, tkv) > limit && (tq > 16 || tkv > 16)) {
      if (tq >= tkv && tq > 16) tq /= 2; else tkv /= 2;
    }
  }
  // A paged cache's K/V tiles never cross a block: a caller's tile_kv must
  // fit in one; any other (table, cache, build default) is cut to it.  But
  // a packed tile that reads K/V as rows where they lie (GQA groups, a
  // head's short queries) takes 32 keys over two blocks of 16 (vLLM's
  // default block size), each 16 rows of a tile load in one block: a 16-key
  // tile would leave the pair path (its tiles are multiples of 32 keys) for
  // the FMA loop, 4-9x the time of decoding and 6x that of chunked prefill
  // (docs/PERF.md).
  // So does every other tile of the tile unit's pair path (longer queries:
  // chunked prefill onto the cache; fp16's packed groups), whose packing
  // reads each row where it lies.
  const bool packed_rows = pack_tile && tq >= group && (rows_tile || fp16_rows_tile);
  const bool amx_pairs = isa == Isa::kAmx && kv_dtype == dtype && (dtype == DType::kBF16 || dtype == DType::kF16) &&
                         (pack_tile ? tq >= group : longest_q > row_rows);
  const bool split_tiles = (packed_rows || amx_pairs) && 2 * p.block_size == detail::kPagedSplitTileKv;
  const bool split_tile_asked = p.tile_kv <= 0 || tkv == detail::kPagedSplitTileKv;
  if (p.block_table && split_tiles && tkv >= detail::kPagedSplitTileKv && split_tile_asked) {
    tkv = detail::kPagedSplitTileKv;
  } else if (p.block_table && tkv > p.block_size) {
    if (p.tile_kv > 0) {
      return Status::Invalid("tile_kv " + std::to_string(p.tile_kv) + " is larger than the paged cache's block_size " +
                             std::to_string(p.block_size) + " (a K/V tile must lie in one block: use tile_kv <= " +
                             std::to_string(p.block_size) + ")");
    }
    tkv = static_cast<int>(p.block_size);
  }
  if (tq < group) pack_tile = false;  // a tile too short for a row of every head
  // A packed tile that reads K/V as rows (the tile unit, bf16 or an FP8
  // cache widened tile by tile) keeps a tile's rows, its scores and its
  // spread probabilities within L1 (48 KiB on the Xeons that have the unit):
  // 64 keys (32 KiB of bf16 K/V rows), 32 for an FP8 cache (whose widened
  // rows come on top of the codes) and where the K/V heads lie side by side
  // (an item walks all of them, each head's 256-byte slices of a tile's
  // rows 2 KiB apart at 8 heads of D128, which fall into an eighth of L1's
  // sets).  GQA 64/8 decoding in BNSD then read at 72-78% of the measured
  // bandwidth against 64-70% with the table's 256 keys, 32/8 at 75-79%
  // against 65-68%; in BSH 32 keys 64-66%, 64 keys 47-48%; over an FP8
  // cache 32 keys took 0.75x the time of 64 (docs/PERF.md).  Table tiles
  // only.
  if (kv_from_table && pack_tile && (rows_tile || fp16_rows_tile)) {
    tkv = std::min(tkv, kv_dtype != dtype || p.kv_heads_side_by_side || fp16_rows_tile ? 32 : 64);
  }
  plan->tile_q = tq;
  plan->tile_kv = tkv;
  plan->pack_tile = pack_tile;
  plan->row_rows = row_rows;
  plan->q_step = pack_tile ? tq / static_cast<int>(group) : tq;
  const int step = plan->q_step;
  plan->working_set_bytes = working_set(tq, tkv);
  plan->limit_bytes = limit;
  plan->target = isa_name(isa);
  plan->source = source;
  const std::int64_t q_tiles = (p.seq_q + step - 1) / step;
  // Packing for short queries (the row path): one item holds whole GQA
  // groups of query heads, so each K/V tile is read once per group, and as
  // many K/V heads as it can, whose slices of a token row it reads together
  // (whole rows in BSH, BSND and TND when it holds every head).  Every head
  // of a batch when split-KV may supply the parallelism; else the most heads
  // that still leave an item per thread; at most 1024 rows (the scratch
  // holds them all).
  plan->pack_gqa = pack_tile ? static_cast<int>(group) : 1;
  // A packed tile reading K/V as rows where each K/V head's keys are a
  // slice of every token row (heads side by side: BSH, BSND, TND, a pool
  // laid out so): one item walks the tiles of every K/V head of its batch
  // entry together, a tile each (kernels' tile_kv_heads), and so reads each
  // tile's token rows whole; split-KV supplies the parallelism.  As many
  // heads as keep their tiles' Q and O (bf16 and fp32) within half the L2:
  // every head's at decoding, fewer for long groups at large head_dims.
  if (pack_tile && p.kv_heads_side_by_side && (rows_tile || fp16_rows_tile)) {
    const std::size_t state_bytes = std::size_t(tq) * std::size_t(tile_dims) * (2 + 4);
    const std::int64_t fit = std::max<std::int64_t>(1, std::int64_t(limit / 2 / state_bytes));
    std::int64_t n = std::min<std::int64_t>({p.kv_heads(), detail::kMaxTileKvHeads, fit});
    while (p.kv_heads() % n != 0) --n;
    plan->pack_gqa = static_cast<int>(group * n);
  }
  // Short queries (decoding, and the packed tiles) are memory-bound: the
  // build default splits them whenever the items would leave threads idle,
  // FA_SPLIT_ENABLE or not (it sets the default of longer queries).
  const bool short_queries = !pack_tile && version != Version::kFA1 && longest_q <= row_rows;
  const int build_splits = detail::kSplitByDefault || short_queries || pack_tile ? kSplitsAuto : 1;
  if (short_queries) {
    const bool splits_may_run =
        p.num_splits == kSplitsAuto || p.num_splits > 1 || (p.num_splits == 0 && build_splits != 1);
    plan->pack_gqa = static_cast<int>(group);
    for (std::int64_t units_per_batch = 1; units_per_batch <= p.num_heads / group; ++units_per_batch) {
      const std::int64_t heads = p.num_heads / units_per_batch;
      if (p.num_heads % units_per_batch != 0 || heads % group != 0 || heads * longest_q > 1024) continue;
      if (!splits_may_run && p.batch * units_per_batch < want_threads) continue;
      plan->pack_gqa = static_cast<int>(heads);
      break;
    }
    // A packed item whose K/V heads lie side by side walks their tiles side
    // by side while the next tile streams in: keep both tiles of every K/V
    // head it holds within half the L2 (8 K/V heads of fp16 D=128 in one
    // 128-key tile are 512 KiB: the prefetched tile would evict the one in
    // use).  Other layouts run head after head, two tiles of one head at a
    // time (in BNSD 32/8 decoding, 128-key tiles 0.91x the time of the 64
    // this rule gave them).  Table tiles only; a caller's, the build's or
    // the tuning cache's stand.
    // Where the K/V heads lie side by side, a tile's rows of all of them
    // also stay within kSideBySideRowTileBytes: each head's pass over a tile
    // reads its slice of every row, and the slices of the other heads wait
    // in L1 and L2 for theirs (every head of the batch entry, not the
    // item's: the tile, and so the bits, must not depend on the threads'
    // packing of heads into items).  32768 keys, BSH, Xeon with AMX: 8
    // heads of D128, 32 keys, bf16 81-85% of the measured bandwidth against
    // 62-69% with the 128 the L2 rule gives (BNSD 80-85%), fp16 8/8 83-86%
    // against 67-71%, fp16 32/8 61% against 46%, an int8 cache 80% against
    // 77% (64 keys); 32 heads 16 keys 82% against 71% at 32; fp16 64/8,
    // compute-bound, 35% against 36% (docs/PERF.md).
    if (kv_from_table) {
      const std::size_t kv_heads_per_item =
          p.kv_heads_side_by_side ? std::max<std::size_t>(1, std::size_t(plan->pack_gqa / group)) : 1;
      const std::size_t key_bytes = kv_heads_per_item * std::size_t(p.head_dim) * dtype_size(dtype) * 2;  // K and V
      while (tkv > 16 && 2 * std::size_t(tkv) * key_bytes > limit / 2) tkv /= 2;
      if (p.kv_heads_side_by_side && p.kv_heads() > 1) {
        const std::size_t row_bytes = std::size_t(p.kv_heads()) * std::size_t(p.head_dim) * dtype_size(kv_dtype) * 2;
        while (tkv > 16 && std::size_t(tkv) * row_bytes > kSideBySideRowTileBytes) tkv /= 2;
      }
      plan->tile_kv = tkv;
      plan->working_set_bytes = working_set(tq, tkv);
    }
  }
  const std::int64_t units = p.num_heads / plan->pack_gqa;
  // Q tiles per item: FA1's item is a whole (batch, head), FA3's a pair
  // where it interleaves them (Fa3Loop::tiles_per_item).
  const std::int64_t per_item = version == Version::kFA1 ? std::max<std::int64_t>(q_tiles, 1)
                                : interleaved_pair       ? 2
                                                         : 1;
  auto groups = [per_item](std::int64_t tiles) { return (tiles + per_item - 1) / per_item; };
  auto q_tiles_of = [step](std::int64_t rows) { return (rows + step - 1) / step; };
  auto chunks = [](std::int64_t keys, std::int64_t chunk) { return keys > chunk ? (keys + chunk - 1) / chunk : 1; };
  std::int64_t unsplit_items = groups(q_tiles) * p.batch * units;
  if (per_sequence) {
    unsplit_items = 0;
    for (const AttentionParams& sp : sequences) unsplit_items += groups(q_tiles_of(sp.seq_q)) * units;
  }
  int threads = want_threads;
  if (const int cap = detail::max_threads_from_env(); cap > 0 && cap < threads) threads = cap;
  // How evenly items fill the threads with chunks of `chunk` keys (a
  // per-sequence call: one chunk size for every sequence).
  auto occupancy_of = [&](std::int64_t chunk, int run_threads) {
    if (run_threads <= 1) return 1.0;
    if (!per_sequence) {
      return simulate_occupancy(p, step, tkv, q_tiles, per_item, static_cast<int>(chunks(p.seq_kv, chunk)), chunk,
                                plan->pack_gqa, run_threads);
    }
    std::vector<double> busy(static_cast<std::size_t>(run_threads), 0.0);
    double work = 0.0;
    for (const AttentionParams& sp : sequences) {
      add_items(sp, step, tkv, q_tiles_of(sp.seq_q), per_item, static_cast<int>(chunks(sp.seq_kv, chunk)), chunk,
                plan->pack_gqa, busy, work);
    }
    const double longest = *std::max_element(busy.begin(), busy.end());
    return longest > 0 ? work / (double(run_threads) * longest) : 1.0;
  };

  // Split-KV: chunks of whole K/V tiles, at least FA_SPLIT_THRESHOLD keys
  // when automatic.  One call splits only when its unsplit items would leave
  // threads idle (the decoding case), aiming at two items per thread.  A
  // call with per-sequence lengths whose queries fit one item each (decoding,
  // speculative decoding, the tail of chunked prefill: the partials stay
  // small) cuts every sequence into chunks of one size when its unsplit
  // items would fill the threads less than 90%: about four chunks per
  // thread, so the long sequences of a mixed batch spread over every core
  // and the short ones stay whole.
  int want = p.num_splits != 0 ? p.num_splits : build_splits;
  if (version == Version::kFA1) want = 1;  // heads are the parallelism
  const std::int64_t kv_span = std::max<std::int64_t>(longest_kv, 1);
  auto whole_tiles = [tkv](std::int64_t keys) { return (keys + tkv - 1) / tkv * tkv; };
  std::int64_t split_keys = kv_span;
  if (want == kSplitsAuto && !per_sequence) {
    want = 1;
    if (unsplit_items < threads) {
      const std::int64_t max_chunks = std::max<std::int64_t>(1, p.seq_kv / std::max(detail::kSplitThreshold, tkv));
      want = static_cast<int>(std::min<std::int64_t>({max_chunks, (2 * threads + unsplit_items - 1) / unsplit_items,
                                                      std::int64_t{kMaxSplits}}));
    }
  }
  if (want == kSplitsAuto) {  // a per-sequence call
    if (threads > 1 && groups(q_tiles_of(longest_q)) == 1 && occupancy_of(kv_span, threads) < 0.9) {
      double key_work = 0.0;  // keys x items, unsplit
      for (const AttentionParams& sp : sequences) key_work += double(sp.seq_kv) * double(groups(q_tiles_of(sp.seq_q)) * units);
      const std::int64_t chunk = static_cast<std::int64_t>(key_work / (4.0 * threads));
      split_keys = std::min(kv_span, whole_tiles(std::max<std::int64_t>({chunk, detail::kSplitThreshold, tkv,
                                                                         (kv_span + kMaxSplits - 1) / kMaxSplits})));
    }
  } else if (want > 1) {
    split_keys = whole_tiles((kv_span + want - 1) / want);
  }
  plan->num_splits = static_cast<int>(chunks(kv_span, split_keys));
  plan->split_keys = split_keys;
  plan->work_items = 0;
  if (per_sequence) {
    for (const AttentionParams& sp : sequences) plan->work_items += groups(q_tiles_of(sp.seq_q)) * units * chunks(sp.seq_kv, split_keys);
  } else {
    plan->work_items = unsplit_items * plan->num_splits;
  }
  if (plan->work_items < threads) threads = static_cast<int>(std::max<std::int64_t>(plan->work_items, 1));
  plan->threads = threads;
  plan->occupancy = occupancy_of(split_keys, threads);
  if (plan->working_set_bytes > limit) {
    // Suggest the largest tile_q that fits with this tile_kv, else the
    // largest square-ish pair below the request.
    int fit_q = tq;
    while (fit_q > 16 && working_set(fit_q, tkv) > limit) fit_q /= 2;
    std::string hint;
    if (working_set(fit_q, tkv) <= limit) {
      hint = "use a smaller tile_q (" + std::to_string(fit_q) + " fits with tile_kv " + std::to_string(tkv) + ")";
    } else {
      int sq = tq, skv = tkv;
      while ((sq > 16 || skv > 16) && working_set(sq, skv) > limit) {
        if (skv >= sq && skv > 16) skv /= 2; else sq /= 2;
      }
      hint = "use smaller tiles (" + std::to_string(sq) + "x" + std::to_string(skv) + " fits)";
    }
    return Status::Invalid("Error: Resource usage exceeds device limit. L2 working set: " + kib(plan->working_set_bytes) +
                           " per thread for tiles " + std::to_string(tq) + "x" + std::to_string(tkv) + " at head_dim " +
                           std::to_string(D) + " (limit: " + kib(limit) + " per core, " + plan->target + "); " + hint);
  }
  return Status::Ok();
}

}  // namespace fa
