// dx.matmul: a hand-expanded (2x3)(3x4) product, batches and batch broadcasting, transpose
// attributes, NumPy rank-1 rules, i8 x i8 -> i32 with wrap, f64 accumulation, views, errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <thread>

#include "fake_host.hpp"

namespace deepx::ref::testing {
namespace {

class Matmul : public ::testing::Test {
 protected:
  Reference ref;
  void TearDown() override { EXPECT_EQ(FakeHost::live_errors(), 0); }
  Status mm(const TestTensor& a, const TestTensor& b, const TestTensor& out, bool ta = false,
            bool tb = false) {
    return ref.call("dx.matmul", {&a, &b}, {&out},
                    {attr_bool("transpose_a", ta), attr_bool("transpose_b", tb)});
  }
};

// A = [[1,2,3],[4,5,6]], B = [[1,0,-1,2],[2,1,0,-1],[0,3,1,1]].
const std::vector<double> kA = {1, 2, 3, 4, 5, 6};
const std::vector<double> kB = {1, 0, -1, 2, 2, 1, 0, -1, 0, 3, 1, 1};
// C = A B, expanded by hand:
//  c00 = 1*1 + 2*2 + 3*0 = 5    c01 = 1*0 + 2*1 + 3*3 = 11   c02 = -1 + 0 + 3 = 2
//  c03 = 2 - 2 + 3 = 3          c10 = 4 + 10 + 0 = 14        c11 = 0 + 5 + 18 = 23
//  c12 = -4 + 0 + 6 = 2         c13 = 8 - 5 + 6 = 9
const std::vector<double> kC = {5, 11, 2, 3, 14, 23, 2, 9};

TEST_F(Matmul, HandExpandedProductInEveryFloatDtype) {
  for (DType t : kF) {
    SCOPED_TRACE(name_of(t));
    const TestTensor a = TestTensor::of(t, {2, 3}, kA);
    const TestTensor b = TestTensor::of(t, {3, 4}, kB);
    TestTensor c(t, {2, 4});
    ASSERT_TRUE(mm(a, b, c).ok());
    EXPECT_EQ(c.values(), kC);
  }
}

TEST_F(Matmul, TransposeAttributesEqualPreTransposedOperands) {
  // A^T stored (3,2) and B^T stored (4,3).
  const TestTensor at = TestTensor::of(DType::kF32, {3, 2}, {1, 4, 2, 5, 3, 6});
  const TestTensor bt = TestTensor::of(DType::kF32, {4, 3}, {1, 2, 0, 0, 1, 3, -1, 0, 1, 2, -1, 1});
  const TestTensor a = TestTensor::of(DType::kF32, {2, 3}, kA);
  const TestTensor b = TestTensor::of(DType::kF32, {3, 4}, kB);
  TestTensor c(DType::kF32, {2, 4});
  ASSERT_TRUE(mm(at, b, c, true, false).ok());
  EXPECT_EQ(c.values(), kC);
  ASSERT_TRUE(mm(a, bt, c, false, true).ok());
  EXPECT_EQ(c.values(), kC);
  ASSERT_TRUE(mm(at, bt, c, true, true).ok());
  EXPECT_EQ(c.values(), kC);
  // The same through non-contiguous views: B as a (3,4) view of B^T's storage, strides (1,3).
  TestTensor b_view(DType::kF32, {3, 4}, {1, 3}, 0, 12);
  for (int i = 0; i < 12; ++i) {
    const float f = static_cast<float>(bt.get(i));
    std::memcpy(static_cast<std::byte*>(b_view.mutable_dl()->data) + i * 4, &f, 4);
  }
  // A at an offset of 5 elements, rows 4 apart.
  TestTensor a_view(DType::kF32, {2, 3}, {4, 1}, 5, 12);
  for (int i = 0; i < 6; ++i) a_view.set(i, kA[i]);
  ASSERT_TRUE(mm(a_view, b_view, c).ok());
  EXPECT_EQ(c.values(), kC);
}

TEST_F(Matmul, BatchedAndBroadcastBatches) {
  // (2,2,3) x (3,4): batch 1 is -A, so its product is -C.
  std::vector<double> a2 = kA;
  for (double v : kA) a2.push_back(-v);
  const TestTensor a = TestTensor::of(DType::kF64, {2, 2, 3}, a2);
  const TestTensor b = TestTensor::of(DType::kF64, {3, 4}, kB);
  TestTensor c(DType::kF64, {2, 2, 4});
  ASSERT_TRUE(mm(a, b, c).ok());
  std::vector<double> expected = kC;
  for (double v : kC) expected.push_back(-v);
  EXPECT_EQ(c.values(), expected);

  // (2,1,2,3) x (3,3,2) -> (2,3,2,2), checked against a plain triple loop.
  std::vector<double> x(12), y(18);
  for (int i = 0; i < 12; ++i) x[i] = i - 5;
  for (int i = 0; i < 18; ++i) y[i] = (i * 7) % 5 - 2;
  const TestTensor xa = TestTensor::of(DType::kF64, {2, 1, 2, 3}, x);
  const TestTensor yb = TestTensor::of(DType::kF64, {3, 3, 2}, y);
  TestTensor z(DType::kF64, {2, 3, 2, 2});
  ASSERT_TRUE(mm(xa, yb, z).ok());
  std::vector<double> want;
  for (int p = 0; p < 2; ++p)
    for (int q = 0; q < 3; ++q)
      for (int m = 0; m < 2; ++m)
        for (int n = 0; n < 2; ++n) {
          double s = 0;
          for (int k = 0; k < 3; ++k) s += x[p * 6 + m * 3 + k] * y[q * 6 + k * 2 + n];
          want.push_back(s);
        }
  EXPECT_EQ(z.values(), want);
}

TEST_F(Matmul, RankOneOperandsFollowNumPy) {
  const TestTensor v = TestTensor::of(DType::kF32, {3}, {1, 2, 3});
  const TestTensor w = TestTensor::of(DType::kF32, {3}, {1, 0, -1});
  const TestTensor a = TestTensor::of(DType::kF32, {2, 3}, kA);
  const TestTensor b = TestTensor::of(DType::kF32, {3, 4}, kB);
  TestTensor vb(DType::kF32, {4});
  ASSERT_TRUE(mm(v, b, vb).ok());
  EXPECT_EQ(vb.values(), (std::vector<double>{5, 11, 2, 3}));  // v B = first row of C
  TestTensor aw(DType::kF32, {2});
  ASSERT_TRUE(mm(a, w, aw).ok());
  EXPECT_EQ(aw.values(), (std::vector<double>{-2, -2}));  // 1 - 3, 4 - 6
  TestTensor dot(DType::kF32, {});
  ASSERT_TRUE(mm(v, v, dot, true, true).ok());  // transposition ignored for rank 1
  EXPECT_EQ(dot.get(0), 14);
  // Batched with a 1-D right operand: (2,2,3) x (3) -> (2,2).
  std::vector<double> a2 = kA;
  for (double t : kA) a2.push_back(2 * t);
  const TestTensor batch = TestTensor::of(DType::kF32, {2, 2, 3}, a2);
  TestTensor bw(DType::kF32, {2, 2});
  ASSERT_TRUE(mm(batch, w, bw).ok());
  EXPECT_EQ(bw.values(), (std::vector<double>{-2, -2, -4, -4}));
  TestTensor wrong(DType::kF32, {1, 4});  // the promoted dim is removed
  EXPECT_EQ(mm(v, b, wrong).code, DX_SHAPE_MISMATCH);
}

TEST_F(Matmul, Int8ProductsAccumulateInI32WithWrap) {
  const TestTensor a = TestTensor::ints(DType::kI8, {2, 2}, {127, 127, -128, -128});
  const TestTensor b = TestTensor::ints(DType::kI8, {2, 1}, {127, 127});
  TestTensor c(DType::kI32, {2, 1});
  ASSERT_TRUE(mm(a, b, c).ok());
  EXPECT_EQ(c.int_values(), (std::vector<std::int64_t>{32258, -32512}));  // 2*127*127, -2*128*127
  // K = 140000 products of 127*127 = 16129: 2258060000 wraps to 2258060000 - 2^32.
  TestTensor ones_a(DType::kI8, {1, 140000}, {0, 0}, 0, 1);
  TestTensor ones_b(DType::kI8, {140000, 1}, {0, 0}, 0, 1);
  ones_a.set_int(0, 127);
  ones_b.set_int(0, 127);
  TestTensor big(DType::kI32, {1, 1});
  ASSERT_TRUE(mm(ones_a, ones_b, big).ok());
  EXPECT_EQ(big.get_int(0), 2258060000LL - 4294967296LL);
  EXPECT_EQ(ref.find("dx.matmul", {DType::kI8, DType::kI8}, {DType::kI8}), nullptr);
  EXPECT_EQ(ref.find("dx.matmul", {DType::kI32, DType::kI32}, {DType::kI32}), nullptr);
}

TEST_F(Matmul, AccumulatesInF64AndRoundsOnce) {
  // 1 + 2^-11 + 2^-11 = 1 + 2^-10 exactly: an f16 accumulator would round 1 + 2^-11 back to 1
  // twice and return 1.
  const double h = std::ldexp(1.0, -11);
  const TestTensor a = TestTensor::of(DType::kF16, {1, 3}, {1, h, h});
  const TestTensor b = TestTensor::of(DType::kF16, {3, 1}, {1, 1, 1});
  TestTensor c(DType::kF16, {1, 1});
  ASSERT_TRUE(mm(a, b, c).ok());
  EXPECT_EQ(c.get_bits16(0), 0x3C01);
  const double g = std::ldexp(1.0, -8);  // the same for bf16
  const TestTensor abf = TestTensor::of(DType::kBF16, {1, 3}, {1, g, g});
  const TestTensor bbf = TestTensor::of(DType::kBF16, {3, 1}, {1, 1, 1});
  TestTensor cbf(DType::kBF16, {1, 1});
  ASSERT_TRUE(mm(abf, bbf, cbf).ok());
  EXPECT_EQ(cbf.get_bits16(0), 0x3F81);
}

TEST_F(Matmul, EmptyInnerDimensionGivesZerosAndEmptyOutputsWork) {
  const TestTensor a(DType::kF32, {2, 0});
  const TestTensor b(DType::kF32, {0, 3});
  TestTensor c = TestTensor::of(DType::kF32, {2, 3}, {9, 9, 9, 9, 9, 9});
  ASSERT_TRUE(mm(a, b, c).ok());
  EXPECT_EQ(c.values(), (std::vector<double>(6, 0.0)));
  const TestTensor e(DType::kF32, {0, 3});
  const TestTensor f = TestTensor::of(DType::kF32, {3, 2}, {1, 2, 3, 4, 5, 6});
  TestTensor g(DType::kF32, {0, 2});
  EXPECT_TRUE(mm(e, f, g).ok());
  const TestTensor zero_batch(DType::kF32, {0, 2, 3});
  TestTensor h(DType::kF32, {0, 2, 2});
  EXPECT_TRUE(mm(zero_batch, f, h).ok());
}

TEST_F(Matmul, ShapeErrors) {
  const TestTensor a = TestTensor::of(DType::kF32, {2, 3}, kA);
  const TestTensor b = TestTensor::of(DType::kF32, {3, 4}, kB);
  TestTensor c(DType::kF32, {2, 4});
  EXPECT_EQ(mm(a, a, c).code, DX_SHAPE_MISMATCH);           // K 3 vs 2
  EXPECT_EQ(mm(a, b, c, true).code, DX_SHAPE_MISMATCH);     // A^T is (3,2)
  TestTensor wrong(DType::kF32, {4, 2});
  EXPECT_EQ(mm(a, b, wrong).code, DX_SHAPE_MISMATCH);
  const TestTensor scalar = TestTensor::of(DType::kF32, {}, {2});
  EXPECT_EQ(mm(scalar, b, c).code, DX_SHAPE_MISMATCH);
  const TestTensor batch_a(DType::kF32, {2, 2, 3});
  const TestTensor batch_b(DType::kF32, {3, 3, 4});
  TestTensor batch_c(DType::kF32, {3, 2, 4});
  EXPECT_EQ(mm(batch_a, batch_b, batch_c).code, DX_SHAPE_MISMATCH);  // batches 2 vs 3
}

TEST_F(Matmul, ConcurrentCallsAgreeWithASequentialCall) {
  // The plugin declares DX_PLUGIN_CAP_CONCURRENT_KERNELS: kernels keep no shared state, so calls
  // from several threads give the same bits as one sequential call (and the same on every run).
  std::vector<double> x(8 * 9), y(9 * 7);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<double>(i)) * 3;
  for (std::size_t i = 0; i < y.size(); ++i) y[i] = std::cos(static_cast<double>(i)) * 2;
  const TestTensor a = TestTensor::of(DType::kF32, {8, 9}, x);
  const TestTensor b = TestTensor::of(DType::kF32, {9, 7}, y);
  TestTensor want(DType::kF32, {8, 7});
  ASSERT_TRUE(mm(a, b, want).ok());
  const std::vector<double> expected = want.values();
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 50; ++round) {
        TestTensor got(DType::kF32, {8, 7});
        if (!mm(a, b, got).ok() || got.values() != expected) ++mismatches[t];
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

}  // namespace
}  // namespace deepx::ref::testing
