#include <gtest/gtest.h>

#include "shape_rules.hpp"

using namespace deepx::conformance;

namespace {
ShapeResult spec(const std::string& op, std::vector<Shape> shapes, const std::string& attrs = "none",
                 DType d = DType::F32) {
  return output_spec(op, shapes, d, parse_attrs(attrs));
}
}  // namespace

TEST(CertifyShapeRules, Broadcasting) {
  EXPECT_EQ(spec("dx.add", {{3, 4}, {4}}).output->shape, (Shape{3, 4}));
  EXPECT_EQ(spec("dx.add", {{3, 1}, {1, 5}}).output->shape, (Shape{3, 5}));
  EXPECT_EQ(spec("dx.add", {{}, {2, 0}}).output->shape, (Shape{2, 0}));
  EXPECT_FALSE(spec("dx.add", {{3}, {4}}).output.has_value());
}

TEST(CertifyShapeRules, Reductions) {
  EXPECT_EQ(spec("dx.sum", {{2, 3, 4}}).output->shape, Shape{});
  EXPECT_EQ(spec("dx.sum", {{2, 3, 4}}, "axes:[-1,0]").output->shape, (Shape{3}));
  EXPECT_EQ(spec("dx.sum", {{2, 3, 4}}, "axes:[1];keepdims:true").output->shape, (Shape{2, 1, 4}));
  EXPECT_EQ(spec("dx.sum", {{2, 3}}, "axes:[]").output->shape, Shape{});
  EXPECT_EQ(spec("dx.sum", {{2}}, "none", DType::I8).output->dtype, DType::I64);
  EXPECT_EQ(spec("dx.max", {{2}}, "none", DType::I8).output->dtype, DType::I8);
  EXPECT_FALSE(spec("dx.sum", {{2, 3}}, "axes:[2]").output.has_value());
  EXPECT_FALSE(spec("dx.sum", {{2, 3}}, "axes:[0,-2]").output.has_value());
  EXPECT_FALSE(spec("dx.max", {{0, 3}}, "axes:[0]").error.empty());
}

TEST(CertifyShapeRules, Matmul) {
  EXPECT_EQ(spec("dx.matmul", {{2, 3}, {3, 5}}).output->shape, (Shape{2, 5}));
  EXPECT_EQ(spec("dx.matmul", {{3}, {3, 5}}).output->shape, (Shape{5}));
  EXPECT_EQ(spec("dx.matmul", {{2, 3}, {3}}).output->shape, (Shape{2}));
  EXPECT_EQ(spec("dx.matmul", {{3}, {3}}).output->shape, Shape{});
  EXPECT_EQ(spec("dx.matmul", {{4, 1, 2, 3}, {5, 3, 7}}).output->shape, (Shape{4, 5, 2, 7}));
  EXPECT_EQ(spec("dx.matmul", {{3, 2}, {5, 3}}, "transpose_a:true;transpose_b:true").output->shape, (Shape{2, 5}));
  EXPECT_EQ(spec("dx.matmul", {{2, 3}, {3, 5}}, "none", DType::I8).output->dtype, DType::I32);
  EXPECT_FALSE(spec("dx.matmul", {{2, 3}, {4, 5}}).output.has_value());
}

TEST(CertifyShapeRules, TransposeAndFill) {
  EXPECT_EQ(spec("dx.transpose", {{2, 3, 4}}).output->shape, (Shape{4, 3, 2}));
  EXPECT_EQ(spec("dx.transpose", {{2, 3, 4}}, "perm:[1,0,2]").output->shape, (Shape{3, 2, 4}));
  EXPECT_FALSE(spec("dx.transpose", {{2, 3}}, "perm:[0,0]").output.has_value());
  EXPECT_EQ(spec("dx.fill", {{5, 0}}).output->shape, (Shape{5, 0}));
}

TEST(CertifyShapeRules, AbsTermSumsForSumAndMatmul) {
  int64_t k = 0;
  auto sums = abs_term_sums("dx.sum", {{2, 3}}, {{1, -2, 3, -4, 5, -6}}, parse_attrs("axes:[1]"), k);
  EXPECT_EQ(k, 3);
  EXPECT_EQ(sums, (std::vector<double>{6, 15}));
  sums = abs_term_sums("dx.sum", {{2, 3}}, {{1, -2, 3, -4, 5, -6}}, parse_attrs("axes:[0]"), k);
  EXPECT_EQ(sums, (std::vector<double>{5, 7, 9}));
  // [[1,-2],[3,4]] @ [[1],[-1]]: |1*1|+|-2*-1| = 3, |3|+|-4| = 7
  sums = abs_term_sums("dx.matmul", {{2, 2}, {2, 1}}, {{1, -2, 3, 4}, {1, -1}}, {}, k);
  EXPECT_EQ(k, 2);
  EXPECT_EQ(sums, (std::vector<double>{3, 7}));
  // transpose_a: A stored [k,m] = [[1,3],[-2,4]] is the same logical A
  sums = abs_term_sums("dx.matmul", {{2, 2}, {2, 1}}, {{1, 3, -2, 4}, {1, -1}}, parse_attrs("transpose_a:true"), k);
  EXPECT_EQ(sums, (std::vector<double>{3, 7}));
  // batch broadcast: A [2,1,2] (two batches), B [2,1] shared
  sums = abs_term_sums("dx.matmul", {{2, 1, 2}, {2, 1}}, {{1, 2, 3, 4}, {1, 1}}, {}, k);
  EXPECT_EQ(sums, (std::vector<double>{3, 7}));
}

TEST(CertifyShapeRules, ExpectedSignatures) {
  EXPECT_EQ(expected_signature("dx.add", DType::F16), (std::vector<DType>{DType::F16, DType::F16, DType::F16}));
  EXPECT_EQ(expected_signature("dx.sum", DType::U8), (std::vector<DType>{DType::U8, DType::I64}));
  EXPECT_EQ(expected_signature("dx.matmul", DType::I8), (std::vector<DType>{DType::I8, DType::I8, DType::I32}));
  EXPECT_EQ(expected_signature("dx.fill", DType::Bool), (std::vector<DType>{DType::Bool}));
  EXPECT_EQ(expected_signature("dx.conv2d", DType::F32).size(), 4u);
  EXPECT_TRUE(expected_signature("dx.nope", DType::F32).empty());
}
