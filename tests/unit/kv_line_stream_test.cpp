// The next K/V tile's line stream (kernels/kv_line_stream.h): whatever the
// rows' layout and however the tile loop splits its issues, it visits each
// of the tile's lines once, K's rows and then V's, in address order within
// a row, and nothing past them.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#define FA_KERNEL_NS line_stream_test
#include "kernels/kv_line_stream.h"

namespace {

using fa::line_stream_test::KvLineStream;

// The lines a stream must visit, in order.
std::vector<const char*> expected_lines(const KvLineStream& s) {
  std::vector<const char*> lines;
  for (int part = 0; part < 2; ++part) {
    for (int r = 0; r < s.rows; ++r) {
      const char* row = s.row_at(part, r);
      for (int l = 0; l < s.lines_per_row; ++l) lines.push_back(row + l * 64);
    }
  }
  return lines;
}

// Visits every line, `step` lines an issue, and a few issues past the end.
std::vector<const char*> visited_lines(KvLineStream s, int step) {
  std::vector<const char*> lines;
  for (int i = 0; i < s.total_lines() / step + 4; ++i) {
    s.for_next(step, [&](const char* line) { lines.push_back(line); });
  }
  return lines;
}

KvLineStream stream(const char* k, const char* v, std::int64_t k_stride, std::int64_t v_stride, int rows,
                    int lines_per_row, int split = 1 << 30, const char* k_second = nullptr,
                    const char* v_second = nullptr) {
  KvLineStream s;
  s.base[0] = k;
  s.base[1] = v;
  s.stride[0] = k_stride;
  s.stride[1] = v_stride;
  s.rows = rows;
  s.lines_per_row = lines_per_row;
  s.part = 0;
  s.split = split;
  s.second[0] = k_second;
  s.second[1] = v_second;
  return s;
}

TEST(KvLineStream, VisitsEachLineOnceInOrderForEveryLayoutAndStep) {
  static char pool[1 << 20];
  const char* k = pool;
  const char* v = pool + (1 << 19);
  const KvLineStream layouts[] = {
      stream(k, v, 256, 256, 64, 4),     // rows end to end (BNSD, head_dim 128 in bf16)
      stream(k, v, 2048, 2048, 64, 4),   // a token row apart (BSH, 8 heads)
      stream(k, v, 256, 2048, 17, 4),    // K end to end, V strided, an odd tile
      stream(k, v, 192, 192, 5, 3),      // rows of three lines end to end
      stream(k, v, 0, 0, 1, 96),         // a shared slot: one long row each
      stream(k, v, 128, 128, 1, 2),      // a tile of one key
      // a tile over two blocks of a paged cache, its second block before its
      // first in the pool: rows end to end, then a token row apart
      stream(k + 8192, v + 8192, 256, 256, 32, 4, 16, k, v),
      stream(k + 65536, v + 65536, 2048, 2048, 29, 4, 16, k, v),
  };
  for (const KvLineStream& s : layouts) {
    const std::vector<const char*> want = expected_lines(s);
    ASSERT_EQ(static_cast<int>(want.size()), s.total_lines());
    for (int step : {1, 2, 3, 7, 64, s.total_lines()}) {
      EXPECT_EQ(visited_lines(s, step), want) << "stride " << s.stride[0] << "/" << s.stride[1] << ", rows " << s.rows
                                              << ", lines " << s.lines_per_row << ", step " << step;
    }
  }
}

TEST(KvLineStream, AnEmptyStreamVisitsNothing) {
  KvLineStream none;  // part 2: the tile after the last
  int visits = 0;
  none.for_next(100, [&](const char*) { ++visits; });
  EXPECT_EQ(visits, 0);
  EXPECT_EQ(none.total_lines(), 0);
}

}  // namespace
