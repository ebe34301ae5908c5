// Host tests of the portable kernel bodies (include/deepx/gpu/), compiled by g++ in host
// emulation: f16/bf16 conversions against the reference's, Philox and the random mappings
// against the reference bit for bit, layout building (broadcast, collapsing), and the tiled
// GEMM run phase by phase (as the GPU runs it) against a naive product.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "deepx/gpu/elementwise.h"
#include "deepx/gpu/gemm.h"
#include "deepx/gpu/layout_builder.h"
#include "deepx/gpu/numeric.h"
#include "deepx/gpu/philox.h"
#include "deepx/gpu/reduce.h"
#include "deepx/reference/half.hpp"
#include "deepx/reference/kernels.hpp"

namespace deepx::gpu {
namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(Numeric, HalfToFloatMatchesTheReferenceForEveryPattern) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float ours = half_to_float(static_cast<uint16_t>(h));
    const float ref = deepx::ref::f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(ref)) {
      EXPECT_TRUE(std::isnan(ours)) << h;
    } else {
      EXPECT_EQ(bits_of(ours), bits_of(ref)) << "pattern " << h;
    }
    EXPECT_EQ(bits_of(bfloat16_to_float(static_cast<uint16_t>(h))),
              bits_of(deepx::ref::bf16_to_f32(static_cast<uint16_t>(h))));
  }
}

TEST(Numeric, FloatToHalfRoundsLikeTheReference) {
  // Every f16 value, the midpoints next to it (ties to even) and their neighbours, then
  // random f32 patterns.
  std::vector<float> cases;
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    const float v = deepx::ref::f16_to_f32(static_cast<uint16_t>(h));
    const float next = deepx::ref::f16_to_f32(static_cast<uint16_t>(h + 1));
    const float mid = (v + next) / 2;  // exact in f32
    for (float c : {v, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) {
      cases.push_back(c);
      cases.push_back(-c);
    }
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 2000000; ++i) cases.push_back(float_of(rng()));
  cases.push_back(std::numeric_limits<float>::infinity());
  cases.push_back(-std::numeric_limits<float>::infinity());
  for (float c : cases) {
    const uint16_t ref = deepx::ref::f32_to_f16(c);
    const uint16_t ours = float_to_half(c);
    if (std::isnan(c)) {
      EXPECT_EQ(ours & 0x7c00, 0x7c00);
      EXPECT_NE(ours & 0x3ff, 0);
      continue;
    }
    ASSERT_EQ(ours, ref) << "f32 bits " << std::hex << bits_of(c);
    const uint16_t ref_bf = deepx::ref::f32_to_bf16(c);
    ASSERT_EQ(float_to_bfloat16(c), ref_bf) << "f32 bits " << std::hex << bits_of(c);
  }
}

TEST(Numeric, DoubleToNarrowRoundsOnceLikeTheReference) {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> wide(-70000.0, 70000.0);
  std::uniform_real_distribution<double> small(-1e-4, 1e-4);
  for (int i = 0; i < 500000; ++i) {
    for (double d : {wide(rng), small(rng)}) {
      alignas(8) unsigned char out[8];
      store_from_double(out, DType::F16, d);
      uint16_t h;
      std::memcpy(&h, out, 2);
      ASSERT_EQ(h, deepx::ref::f64_to_f16(d)) << d;
      store_from_double(out, DType::BF16, d);
      std::memcpy(&h, out, 2);
      ASSERT_EQ(h, deepx::ref::f64_to_bf16(d)) << d;
    }
  }
}

TEST(Numeric, CastSaturatesTruncatesAndWraps) {
  alignas(8) unsigned char out[8] = {};
  const double in[] = {3.9, -3.9, 1e30, -1e30, std::nan("")};
  const int32_t expect_i32[] = {3, -3, INT32_MAX, INT32_MIN, 0};
  for (int i = 0; i < 5; ++i) {
    cast_element(out, DType::I32, &in[i], DType::F64);
    int32_t v;
    std::memcpy(&v, out, 4);
    EXPECT_EQ(v, expect_i32[i]) << in[i];
  }
  const double big = 1e300;
  cast_element(out, DType::I64, &big, DType::F64);
  int64_t v64;
  std::memcpy(&v64, out, 8);
  EXPECT_EQ(v64, INT64_MAX);
  const int32_t wide = 300;
  cast_element(out, DType::I8, &wide, DType::I32);
  EXPECT_EQ(static_cast<int8_t>(out[0]), 44);
  cast_element(out, DType::Bool, &wide, DType::I32);
  EXPECT_EQ(out[0], 1);
  const int64_t huge = (int64_t{1} << 62) + 1;  // i64 -> f32 must round once
  cast_element(out, DType::F32, &huge, DType::I64);
  float f;
  std::memcpy(&f, out, 4);
  EXPECT_EQ(f, static_cast<float>(huge));
}

TEST(Philox, MatchesTheReferenceGenerator) {
  std::mt19937_64 rng(3);
  for (int i = 0; i < 10000; ++i) {
    const uint64_t key = rng(), counter = rng();
    const auto ref = deepx::ref::philox4x32_10(
        {static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32), 0, 0},
        {static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32)});
    const Philox4 ours = philox4x32_10(static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32),
                                       0, 0, static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32));
    for (int w = 0; w < 4; ++w) ASSERT_EQ(ours.w[w], ref[static_cast<size_t>(w)]);
  }
}

TEST(Philox, KnownAnswerOfRandom123) {
  // Random123's kat_vectors: philox4x32 10 rounds, counter = key = 0.
  const Philox4 r = philox4x32_10(0, 0, 0, 0, 0, 0);
  EXPECT_EQ(r.w[0], 0x6627e8d5u);
  EXPECT_EQ(r.w[1], 0xe169c58du);
  EXPECT_EQ(r.w[2], 0xbc57ac4cu);
  EXPECT_EQ(r.w[3], 0x9b00dbd8u);
}

TEST(Philox, ElementMappingFollowsTheReferenceContract) {
  const PhiloxStream s = PhiloxStream::make(0x123456789abcdefULL, 5);
  for (uint64_t i = 0; i < 64; ++i) {
    const auto block = deepx::ref::philox4x32_10(
        {static_cast<uint32_t>(5 + i / 4), 0, 0, 0}, {0x89abcdefu, 0x01234567u});
    EXPECT_EQ(s.uniform(i), (block[i % 4] + 0.5) * 0x1p-32);
    const auto nb = deepx::ref::philox4x32_10(
        {static_cast<uint32_t>(5 + i / 2), 0, 0, 0}, {0x89abcdefu, 0x01234567u});
    const double u1 = (nb[2 * (i % 2)] + 0.5) * 0x1p-32, u2 = (nb[2 * (i % 2) + 1] + 0.5) * 0x1p-32;
    EXPECT_EQ(s.normal(i), std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
  }
}

TEST(Layout, BroadcastsAndCollapses) {
  // (4, 3, 5) + (3, 1): a is compact, b broadcasts over dims 0 and 2.
  const std::vector<int64_t> out{4, 3, 5};
  const auto l = build_layout(out, {OperandShape{out, compact_strides(out)},
                                    OperandShape{{4, 3, 5}, {15, 5, 1}},
                                    OperandShape{{3, 1}, {1, 1}}});
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(l->count, 60);
  for (int64_t i = 0; i < 60; ++i) {
    int64_t off[kMaxOperands];
    layout_offsets(*l, i, off);
    EXPECT_EQ(off[0], i);
    EXPECT_EQ(off[1], i);
    EXPECT_EQ(off[2], (i / 5) % 3);
  }
  // Fully compact operands collapse to one dimension.
  const auto flat = build_layout(out, {OperandShape{out, compact_strides(out)},
                                       OperandShape{out, compact_strides(out)}});
  ASSERT_TRUE(flat.has_value());
  EXPECT_EQ(flat->rank, 1);
  // A transposed view does not collapse, and its offsets are the transposed ones.
  const auto t = build_layout({3, 4}, {OperandShape{{3, 4}, {4, 1}}, OperandShape{{3, 4}, {1, 3}}});
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->rank, 2);
  EXPECT_EQ(layout_offset(*t, 1, 5), 1 * 1 + 1 * 3);  // position (1, 1)
  // Rank 0 and empty shapes.
  const auto scalar = build_layout({}, {OperandShape{{}, {}}});
  ASSERT_TRUE(scalar.has_value());
  EXPECT_EQ(scalar->count, 1);
  EXPECT_EQ(layout_offset(*scalar, 0, 0), 0);
  const auto empty = build_layout({2, 0}, {OperandShape{{2, 0}, {0, 1}}});
  ASSERT_TRUE(empty.has_value());
  EXPECT_EQ(empty->count, 0);
  EXPECT_FALSE(broadcast_shapes({{2, 3}, {4, 3}}).has_value());
  EXPECT_EQ(*broadcast_shapes({{2, 1, 3}, {4, 1}}), (std::vector<int64_t>{2, 4, 3}));
}

TEST(Elementwise, IntegerSemantics) {
  EXPECT_EQ(apply_binary_int<int32_t>(BinaryOp::Div, INT32_MIN, -1), INT32_MIN);
  EXPECT_EQ(apply_binary_int<int32_t>(BinaryOp::Div, -7, 2), -3);
  EXPECT_EQ(apply_binary_int<int8_t>(BinaryOp::Add, 127, 1), -128);
  EXPECT_EQ(apply_binary_int<uint8_t>(BinaryOp::Mul, 16, 16), 0);
  EXPECT_EQ(apply_unary_int<int16_t>(UnaryOp::Abs, INT16_MIN), INT16_MIN);
  EXPECT_EQ(apply_unary_int<uint8_t>(UnaryOp::Neg, 1), 255);
}

TEST(Elementwise, FloatSpecialValues) {
  const double nan = std::nan("");
  EXPECT_TRUE(std::isnan(apply_unary(UnaryOp::Relu, nan)));
  EXPECT_FALSE(std::signbit(apply_unary(UnaryOp::Relu, -0.0)));
  EXPECT_TRUE(std::isnan(apply_unary(UnaryOp::Sign, nan)));
  EXPECT_EQ(apply_unary(UnaryOp::Silu, -HUGE_VAL), 0.0);
  EXPECT_TRUE(std::signbit(apply_unary(UnaryOp::Silu, -HUGE_VAL)));
  EXPECT_EQ(apply_unary(UnaryOp::Round, 2.5), 2.0);
  EXPECT_TRUE(std::isnan(apply_binary(BinaryOp::Maximum, 1.0, nan)));
  EXPECT_TRUE(std::isnan(apply_binary(BinaryOp::Minimum, nan, 1.0)));
}

/// Runs the tiled GEMM the way the GPU does (phases, threads, barriers) over a host grid.
template <class T, class Out>
void emulate_gemm(const GemmTile<T, Out>& g) {
  using Tile = GemmTile<T, Out>;
  auto sh = std::make_unique<typename Tile::Shared>();
  std::vector<typename Tile::Registers> regs(Tile::kThreads);
  for (int64_t b = 0; b < g.s.batch.count; ++b)
    for (int64_t tm = 0; tm < (g.s.m + Tile::BM - 1) / Tile::BM; ++tm)
      for (int64_t tn = 0; tn < (g.s.n + Tile::BN - 1) / Tile::BN; ++tn) {
        for (int t = 0; t < Tile::kThreads; ++t) g.clear(regs[t]);
        for (int64_t k0 = 0; k0 < g.s.k; k0 += Tile::BK) {
          for (int t = 0; t < Tile::kThreads; ++t) g.load(*sh, b, tm, tn, k0, t);
          for (int t = 0; t < Tile::kThreads; ++t) g.compute(*sh, regs[t], t);
        }
        for (int t = 0; t < Tile::kThreads; ++t) g.store(regs[t], b, tm, tn, t);
      }
}

TEST(Gemm, TiledMatchesNaiveForEdgeSizesAndLayouts) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> digit(-4, 4);
  for (auto [m, n, k] : {std::tuple{1, 1, 1}, std::tuple{65, 63, 17}, std::tuple{3, 130, 33},
                         std::tuple{64, 64, 16}, std::tuple{7, 5, 0}}) {
    for (bool a_transposed : {false, true}) {
      for (bool b_transposed : {false, true}) {
        const int batches = 2;
        std::vector<double> a(static_cast<size_t>(batches * m * k)), b(static_cast<size_t>(k * n));
        for (auto& v : a) v = digit(rng);
        for (auto& v : b) v = digit(rng);
        std::vector<double> c(static_cast<size_t>(batches * m * n), -1);
        GemmShape s;
        s.m = m;
        s.n = n;
        s.k = k;
        s.a_rs = a_transposed ? 1 : k;  // A stored K x M when transposed
        s.a_cs = a_transposed ? m : 1;
        s.b_rs = b_transposed ? 1 : n;
        s.b_cs = b_transposed ? k : 1;
        s.c_rs = n;
        s.c_cs = 1;
        // Batch 2 of A, B broadcast (stride 0).
        s.batch = *build_layout({batches}, {OperandShape{{batches}, {int64_t{m} * n}},
                                            OperandShape{{batches}, {int64_t{m} * k}},
                                            OperandShape{{1}, {0}}});
        GemmTile<double, double> g{s, a.data(), b.data(), c.data()};
        emulate_gemm(g);
        for (int bt = 0; bt < batches; ++bt)
          for (int i = 0; i < m; ++i)
            for (int j = 0; j < n; ++j) {
              double want = 0;
              for (int p = 0; p < k; ++p) {
                want += a[static_cast<size_t>(bt * m * k + i * s.a_rs + p * s.a_cs)] *
                        b[static_cast<size_t>(p * s.b_rs + j * s.b_cs)];
              }
              ASSERT_EQ(c[static_cast<size_t>(bt * m * n + i * n + j)], want)
                  << m << "x" << n << "x" << k << " at " << bt << "," << i << "," << j;
            }
      }
    }
  }
}

TEST(Gemm, Int8AccumulatesInWrappingInt32) {
  const int k = 300;
  std::vector<int8_t> a(k, -128), b(k, -128);
  int32_t c = 0;
  GemmShape s;
  s.m = s.n = 1;
  s.k = k;
  s.a_rs = k;
  s.a_cs = 1;
  s.b_rs = 1;
  s.b_cs = 1;
  s.c_rs = s.c_cs = 1;
  s.batch = *build_layout({}, {OperandShape{}, OperandShape{}, OperandShape{}});
  emulate_gemm(GemmTile<int8_t, int32_t>{s, a.data(), b.data(), &c});
  EXPECT_EQ(c, 300 * 16384);
}

TEST(Reduce, TreeMatchesASerialSumAndPropagatesNaN) {
  std::vector<float> in(1000);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i % 17) - 8.0f;
  ReduceFn<float> fn{};
  fn.outer = *build_layout({}, {OperandShape{}, OperandShape{}});
  fn.inner = *build_layout({1000}, {OperandShape{{1000}, {1}}});
  fn.in = in.data();
  float out = 0;
  fn.out = reinterpret_cast<char*>(&out);
  fn.out_type = DType::F32;
  fn.op = ReduceOp::Sum;
  std::vector<double> shared(kReduceThreads);
  auto run = [&] {
    for (int t = 0; t < kReduceThreads; ++t) shared[static_cast<size_t>(t)] = fn.partial(0, t, kReduceThreads);
    for (int stride = kReduceThreads / 2; stride > 0; stride /= 2)
      for (int t = 0; t < kReduceThreads; ++t) tree_step(shared.data(), t, stride, fn);
    fn.finish(0, shared[0]);
  };
  run();
  double want = 0;
  for (float v : in) want += v;
  EXPECT_EQ(out, static_cast<float>(want));
  in[500] = std::nanf("");
  fn.op = ReduceOp::Max;
  run();
  EXPECT_TRUE(std::isnan(out));
}

}  // namespace
}  // namespace deepx::gpu

namespace deepx::gpu {
namespace {

TEST(Reduce, Int128ToDoubleRoundsOnce) {
  std::mt19937_64 rng(13);
  for (int i = 0; i < 200000; ++i) {
    const Int128 v = (static_cast<Int128>(static_cast<int64_t>(rng())) << (rng() % 64)) + static_cast<int64_t>(rng());
    ASSERT_EQ(int128_to_double(v), static_cast<double>(v));
  }
  // Exactly halfway between two doubles above 2^64, with and without a sticky bit below.
  const Int128 tie = (static_cast<Int128>(1) << 70) + (static_cast<Int128>(1) << 17);
  EXPECT_EQ(int128_to_double(tie), static_cast<double>(tie));
  EXPECT_EQ(int128_to_double(tie + 1), static_cast<double>(tie + 1));
}

}  // namespace
}  // namespace deepx::gpu

// ---- bodies of the later op families (extra_ops.h, movement.h) --------------------------------

#include "deepx/gpu/extra_ops.h"
#include "deepx/gpu/movement.h"

namespace deepx::gpu {
namespace {

/// One output of a block-tree reduction, phase by phase as reduce_kernel runs it.
template <class Fn>
typename Fn::Acc run_block_tree(const Fn& fn, int64_t o) {
  std::vector<typename Fn::Acc> shared(kReduceThreads);
  for (int t = 0; t < kReduceThreads; ++t) shared[t] = fn.partial(o, t, kReduceThreads);
  for (int stride = kReduceThreads / 2; stride > 0; stride /= 2) {
    for (int t = 0; t < kReduceThreads; ++t) tree_step(shared.data(), t, stride, fn);
  }
  return shared[0];
}

TEST(ExtraOps, ArgmaxTreeEqualsTheSerialFirstExtreme) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t n = 1 + static_cast<int64_t>(rng() % 2000);
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = static_cast<float>(static_cast<int>(rng() % 9));  // many ties
    if (trial % 3 == 0) v[rng() % v.size()] = NAN;
    if (trial % 5 == 0) v[rng() % v.size()] = NAN;
    for (int sign : {1, -1}) {
      ArgReduceFn<float> fn{};
      fn.outer = *build_layout({}, {OperandShape{{}, {}}, OperandShape{{}, {}}});
      fn.inner = *build_layout({n}, {OperandShape{{n}, {1}}});
      fn.in = v.data();
      fn.sign = sign;
      int64_t best = 0;  // the reference's serial rule
      for (int64_t k = 1; k < n; ++k) {
        const float b = v[static_cast<size_t>(best)], x = v[static_cast<size_t>(k)];
        if (std::isnan(b)) break;
        if (std::isnan(x) || (sign > 0 ? x > b : x < b)) best = k;
      }
      ASSERT_EQ(run_block_tree(fn, 0).index, best) << "trial " << trial << " sign " << sign;
    }
  }
}

TEST(ExtraOps, IntegerProdWrapsInAnyOrder) {
  std::vector<int32_t> v(777);
  std::mt19937 rng(11);
  uint64_t serial = 1;
  for (auto& x : v) {
    x = static_cast<int32_t>(rng());
    serial *= static_cast<uint64_t>(static_cast<int64_t>(x));
  }
  ProdFn<int32_t> fn{};
  fn.outer = *build_layout({}, {OperandShape{{}, {}}, OperandShape{{}, {}}});
  fn.inner = *build_layout({777}, {OperandShape{{777}, {1}}});
  fn.in = v.data();
  EXPECT_EQ(run_block_tree(fn, 0), serial);
}

TEST(ExtraOps, GeluLimitsAndNotOps) {
  EXPECT_TRUE(std::signbit(gelu_value(-INFINITY, false)) && gelu_value(-INFINITY, false) == 0.0);
  EXPECT_TRUE(std::signbit(gelu_value(-INFINITY, true)));
  EXPECT_EQ(gelu_value(INFINITY, false), INFINITY);
  EXPECT_NEAR(gelu_value(1.0, false), 0.8413447460685429, 1e-15);
  EXPECT_TRUE(std::isnan(nan_max(NAN, 1.0)) && std::isnan(nan_min(1.0, NAN)));
  const Layout l = *build_layout({4}, {OperandShape{{4}, {1}}, OperandShape{{4}, {1}}});
  const uint8_t in[4] = {0, 1, 2, 255};
  uint8_t out[4] = {};
  for (int64_t i = 0; i < 4; ++i) NotFn<uint8_t>{l, out, in, true}(i);
  EXPECT_EQ(std::vector<uint8_t>(out, out + 4), (std::vector<uint8_t>{1, 0, 0, 0}));
  for (int64_t i = 0; i < 4; ++i) NotFn<uint8_t>{l, out, in, false}(i);
  EXPECT_EQ(std::vector<uint8_t>(out, out + 4), (std::vector<uint8_t>{255, 254, 253, 0}));
}

TEST(Movement, AxisSumAddsMatchingIndicesInOrder) {
  // scatter_add along axis 1 of a (2, 3) i16 tensor with a (2, 4) index: wraps, keeps x.
  const int16_t x[6] = {1, 2, 3, 4, 5, 6};
  const int64_t idx[8] = {0, 2, 2, 0, 1, 1, 1, 1};
  const int16_t src[8] = {10, 20, 32767, 40, 50, 60, 70, 80};
  int16_t y[6] = {};
  AxisSpace space{};
  space.outer = *build_layout({2}, {OperandShape{{2}, {3}}, OperandShape{{2}, {4}}, OperandShape{{2}, {4}},
                                    OperandShape{{2}, {3}}});
  space.inner = *build_layout({}, {OperandShape{{}, {}}, OperandShape{{}, {}}, OperandShape{{}, {}},
                                   OperandShape{{}, {}}});
  space.extent = 3;
  uint64_t buffer[6] = {};
  AxisSumEndsFn ends{space, reinterpret_cast<char*>(y), reinterpret_cast<const char*>(x), buffer, 1, 1,
                     DType::I16, false};
  for (int64_t i = 0; i < 6; ++i) ends(i);
  const AxisSumLinesFn lines{space, reinterpret_cast<const char*>(idx), reinterpret_cast<const char*>(src), buffer,
                             1, 1, 4, DType::I64, DType::I16, false};
  for (int64_t line = 0; line < 2; ++line) lines(line);
  ends.store = true;
  for (int64_t i = 0; i < 6; ++i) ends(i);
  const int16_t want[6] = {1 + 10 + 40, 2, static_cast<int16_t>(3 + 20 + 32767), 4, 5 + 50 + 60 + 70 + 80, 6};
  EXPECT_EQ(std::vector<int16_t>(y, y + 6), std::vector<int16_t>(want, want + 6));
}

}  // namespace
}  // namespace deepx::gpu
