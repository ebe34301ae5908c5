// Smoke test of the differential harness itself (differential.h): ops whose CPU kernels are
// certified agree with the reference, a shape error is refused by both, and a poisoned output
// element that a kernel fails to write would be reported.
#include "differential.h"

namespace deepx::cpu::testing {
namespace {

TEST(Differential, ForwardAgreesWithTheReference) {
  Differential diff;
  expect_close(diff.run("dx.add", {In::random(DX_DTYPE_F32, {3, 5}), In::random(DX_DTYPE_F32, {5}, -1, 1, 2)},
                        {Out(DX_DTYPE_F32, {3, 5})}),
               0, 0, "add f32");
  expect_close(diff.run("dx.softmax", {In::random(DX_DTYPE_F16, {4, 9})}, {Out(DX_DTYPE_F16, {4, 9})},
                        Attrs().i64("axis", 0)),
               1e-3, 1e-4, "softmax f16");
  expect_equal(diff.run("dx.transpose", {In::random(DX_DTYPE_I16, {2, 3, 4}, -100, 100)},
                        {Out(DX_DTYPE_I16, {4, 2, 3})}, Attrs().i64s("perm", {2, 0, 1})),
               "transpose i16");
}

TEST(Differential, SoftmaxOfARankZeroTensorIsOne) {
  // A rank-0 tensor is one line of one element; axis 0 and -1 are valid there (PyTorch).
  Differential diff;
  for (int64_t axis : {0, -1}) {
    const Result r = diff.run("dx.softmax", {In::of(DX_DTYPE_F32, {}, {3.5})}, {Out(DX_DTYPE_F32, {})},
                              Attrs().i64("axis", axis));
    expect_equal(r, "softmax rank 0");
    ASSERT_EQ(r.cpu.outputs.size(), 1u);
    EXPECT_EQ(r.cpu.outputs[0], std::vector<double>{1.0});
  }
  expect_same_error(diff.run("dx.softmax", {In::of(DX_DTYPE_F32, {}, {3.5})}, {Out(DX_DTYPE_F32, {})},
                             Attrs().i64("axis", 1)),
                    "softmax rank 0, axis 1");
}

TEST(Differential, BothRefuseAShapeMismatch) {
  Differential diff;
  expect_same_error(diff.run("dx.matmul", {In::random(DX_DTYPE_F32, {2, 3}), In::random(DX_DTYPE_F32, {4, 5})},
                             {Out(DX_DTYPE_F32, {2, 5})}),
                    "matmul 2x3 @ 4x5");
}

TEST(Differential, HalfConversionsRoundTrip) {
  for (float f : {0.0f, -0.0f, 1.0f, 0.1f, 65504.0f, 6.0e-8f, -3.140625f}) {
    EXPECT_EQ(half_bits_to_float(float_to_half_bits(f)), static_cast<float>(half_bits_to_float(float_to_half_bits(f))));
  }
  EXPECT_EQ(float_to_half_bits(1.0f), 0x3C00);
  EXPECT_EQ(float_to_half_bits(65520.0f), 0x7C00);
  EXPECT_EQ(half_bits_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(float_to_bf16_bits(1.0f), 0x3F80);
  EXPECT_EQ(bf16_bits_to_float(0xC040), -3.0f);
}

}  // namespace
}  // namespace deepx::cpu::testing
