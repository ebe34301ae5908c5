#include <gtest/gtest.h>

#include <iterator>

#include "deepx/ops.h"
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

// The suite's op table (generated from abi/ops.json) against deepx/ops.h (generated from the same
// file): a hand edit of either, or a stale generated file, fails here.
TEST(CertifyOpTable, MatchesTheHeader) {
  struct Row {
    const char* name;
    int inputs, outputs;
    const char* attrs;
  };
  const Row header[] = {
#define DEEPX_TEST_ROW_(id, name, nin, nout, attrs) {name, nin, nout, attrs},
      DX_OP_TABLE(DEEPX_TEST_ROW_)
#undef DEEPX_TEST_ROW_
  };
  ASSERT_EQ(op_rules().size(), std::size(header));
  for (size_t i = 0; i < std::size(header); ++i) {
    const OpRule& r = op_rules()[i];
    SCOPED_TRACE(header[i].name);
    EXPECT_STREQ(r.name, header[i].name);
    EXPECT_EQ(r.inputs, header[i].inputs);
    EXPECT_EQ(r.outputs, header[i].outputs);
    EXPECT_STREQ(r.attrs, header[i].attrs);
    EXPECT_EQ(find_op_rule(header[i].name), &r);
  }
}

// One call per shape rule: every rule of the closed set has an example here, the example's op
// has that rule, and the suite's implementation gives the documented shape.
TEST(CertifyOpTable, EveryShapeRuleIsImplemented) {
  struct Example {
    const char* op;
    std::vector<Shape> shapes;
    const char* attrs;
    Shape expected;
    std::vector<Shape> outshapes = {};
    int outputs = 1;
  };
  const Example examples[] = {
      {"dx.exp", {{2, 3}}, "none", {2, 3}},
      {"dx.where", {{3, 1}, {1, 4}, {4}}, "none", {3, 4}},
      {"dx.mean", {{2, 3, 4}}, "axes:[1]", {2, 4}},
      {"dx.argmax", {{2, 3}}, "axis:1", {2}},
      {"dx.matmul", {{2, 3}, {3, 5}}, "none", {2, 5}},
      {"dx.log_softmax", {{2, 3}}, "axis:0", {2, 3}},
      {"dx.transpose", {{2, 3}}, "none", {3, 2}},
      {"dx.arange", {{5}}, "none", {5}},
      {"dx.linear", {{4, 3}, {5, 3}, {5}}, "none", {4, 5}},
      {"dx.layer_norm", {{2, 3}, {3}, {3}}, "none", {2, 3}},
      {"dx.batch_norm", {{2, 3, 4}, {3}, {3}, {3}, {3}}, "none", {2, 3, 4}},
      {"dx.embedding", {{10, 4}, {2, 3}}, "none", {2, 3, 4}},
      {"dx.cross_entropy", {{4, 5}, {4}}, "none", {}},
      {"dx.conv2d", {{1, 2, 5, 5}, {3, 2, 3, 3}, {3}}, "none", {1, 3, 3, 3}},
      {"dx.max_pool2d", {{1, 2, 4, 4}}, "kernel:2", {1, 2, 2, 2}},
      {"dx.scaled_dot_product_attention", {{2, 3, 4}, {2, 5, 4}, {2, 5, 6}, kAbsentShape}, "none", {2, 3, 6}},
      {"dx.reshape", {{2, 3}}, "none", {6}, {{6}}},
      {"dx.broadcast_to", {{3, 1}}, "none", {2, 3, 4}, {{2, 3, 4}}},
      {"dx.concat", {{2, 3}, {4, 3}}, "none", {6, 3}},
      {"dx.split", {{6, 2}}, "none", {2, 2}, {}, 3},
      {"dx.slice", {{5, 4}}, "starts:[1];stops:[4]", {3, 4}},
      {"dx.index_select", {{5, 4}, {3}}, "axis:1", {5, 3}},
      {"dx.gather", {{5, 4}, {2, 4}}, "none", {2, 4}},
      {"dx.scatter_add", {{5, 4}, {2, 4}, {2, 4}}, "none", {5, 4}},
      {"dx.pad", {{2, 3}}, "pads:[1,1,0,2]", {4, 5}},
      {"dx.tile", {{2, 3}}, "repeats:[2,1,2]", {2, 2, 6}},
  };
  std::vector<bool> covered(std::size(kShapeRuleNames), false);
  for (const Example& e : examples) {
    SCOPED_TRACE(e.op);
    const OpRule* rule = find_op_rule(e.op);
    ASSERT_NE(rule, nullptr);
    covered[static_cast<size_t>(rule->shape)] = true;
    const OutputsResult r = output_specs(e.op, e.shapes, default_signature(e.op, DType::F32, e.outputs),
                                         parse_attrs(e.attrs), e.outshapes);
    EXPECT_EQ(r.error, "");
    ASSERT_FALSE(r.outputs.empty());
    EXPECT_EQ(r.outputs[0].shape, e.expected);
    EXPECT_EQ(r.outputs.size(), static_cast<size_t>(e.outputs > 1 ? e.outputs : std::max(rule->outputs, 1)));
  }
  for (size_t i = 0; i < covered.size(); ++i) {
    EXPECT_TRUE(covered[i]) << "no example of the shape rule " << kShapeRuleNames[i];
  }
  // Every op reaches its rule's code: no op ends in the "no implementation" branch.
  for (const OpRule& rule : op_rules()) {
    std::vector<Shape> shapes(static_cast<size_t>(std::max(rule.inputs, 1)), Shape{2, 2, 2, 2});
    const OutputsResult r = output_specs(rule.name, shapes, default_signature(rule.name, DType::F32), {}, {{16}});
    EXPECT_EQ(r.error.find("no implementation"), std::string::npos) << rule.name << ": " << r.error;
  }
}

TEST(CertifyOpTable, DtypeRulesAndIndexInputs) {
  EXPECT_EQ(expected_signature("dx.eq", DType::I8), (std::vector<DType>{DType::I8, DType::I8, DType::Bool}));
  EXPECT_EQ(expected_signature("dx.argmin", DType::F16), (std::vector<DType>{DType::F16, DType::I64}));
  EXPECT_EQ(expected_signature("dx.mean", DType::I32), (std::vector<DType>{DType::I32, DType::F64}));
  EXPECT_EQ(expected_signature("dx.embedding", DType::F32), (std::vector<DType>{DType::F32, DType::I64, DType::F32}));
  EXPECT_EQ(expected_signature("dx.dropout", DType::F32), (std::vector<DType>{DType::F32, DType::F32, DType::Bool}));
  EXPECT_EQ(expected_signature("dx.cast", DType::F32), (std::vector<DType>{DType::F32, DType::F16}));
  EXPECT_STREQ(shape_rule_name(find_op_rule("dx.scatter_add")->shape), "scatter-add");
}
