// The generalised case model (signatures, optional and variadic inputs, several outputs,
// backward modes), the shape rules of the second op set, index data, and the tolerance table's
// agreement with its published page (docs/tolerances.md).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "compare.hpp"
#include "data_gen.hpp"
#include "manifest.hpp"
#include "shape_rules.hpp"

using namespace deepx::conformance;

namespace {
OutputsResult specs(const std::string& op, std::vector<Shape> shapes, const std::string& sig,
                    const std::string& attrs = "none", std::vector<Shape> outshapes = {}) {
  return output_specs(op, shapes, *parse_signature(sig), parse_attrs(attrs), outshapes);
}
std::vector<Shape> out_shapes(const OutputsResult& r) {
  std::vector<Shape> v;
  for (const auto& o : r.outputs) v.push_back(o.shape);
  return v;
}
// A plugin that claims what the reference registers for a few ops.
std::vector<SigOption> claims(const std::string& op, bool) {
  if (op == "dx.where")
    return {{"bool", "cpu", "bool:f32:f32->f32", true}, {"bool", "cpu", "bool:i8:i8->i8", false}};
  if (op == "dx.cast")
    return {{"f32", "cpu", "f32->f16", true}, {"f32", "cpu", "f32->i32", false}, {"i8", "cpu", "i8->bool", false}};
  if (op == "dx.split") {
    std::vector<SigOption> v;
    for (int n = 1; n <= 8; ++n) {
      std::string sig = "f32->f32";
      for (int i = 1; i < n; ++i) sig += ":f32";
      v.push_back({"f32", "cpu", sig, true});
    }
    return v;
  }
  if (op == "dx.concat") return {{"f32", "cpu", "f32->f32", true}};
  if (op == "dx.linear") return {{"f32", "cpu", "f32:f32:f32->f32", true}};
  if (op == "dx.embedding") return {{"f32", "cpu", "f32:i32->f32", true}, {"f32", "cpu", "f32:i64->f32", true}};
  if (op == "dx.relu") return {{"f32", "cpu", "f32->f32", true}};
  return {};
}
std::vector<Case> cases_of(const std::string& line, bool auto_backward = false) {
  return expand(parse_family(line, "t:1"), claims, ExpandOptions{auto_backward});
}
}  // namespace

TEST(CertifyOpsV1, SignaturesRoundTrip) {
  auto sig = parse_signature("bool:f32:f32->f32");
  ASSERT_TRUE(sig);
  EXPECT_EQ(sig->inputs, (std::vector<DType>{DType::Bool, DType::F32, DType::F32}));
  EXPECT_EQ(format_signature(*sig), "bool:f32:f32->f32");
  EXPECT_EQ(format_signature(*parse_signature("->f16")), "->f16");
  EXPECT_EQ(parse_signature("f32->f32:bool")->outputs.size(), 2u);
  EXPECT_FALSE(parse_signature("f32"));
  EXPECT_FALSE(parse_signature("f99->f32"));
  EXPECT_EQ(format_signature(default_signature("dx.embedding", DType::F16)), "f16:i64->f16");
  EXPECT_EQ(format_signature(default_signature("dx.dropout", DType::F32)), "f32->f32:bool");
  EXPECT_EQ(format_signature(default_signature("dx.split", DType::I8, 3)), "i8->i8:i8:i8");
  EXPECT_EQ(format_signature(widened_to_f64(*parse_signature("f16:i64:f16->f16"))), "f64:i64:f64->f64");
}

TEST(CertifyOpsV1, ExpansionFollowsClaimedSignatures) {
  // where: every claimed T; a case line names the full signature unless it is the key's default.
  auto where = cases_of("op=dx.where shapes=[3];[3];[3] tier=real");
  ASSERT_EQ(where.size(), 2u);
  EXPECT_EQ(where[0].sig, "bool:f32:f32->f32");
  EXPECT_NE(where[0].line().find("dtypes=bool:f32:f32->f32"), std::string::npos);
  // cast: one case per claimed pair; the line reparses to the same case.
  auto cast = cases_of("op=dx.cast shapes=[7]");
  ASSERT_EQ(cast.size(), 3u);
  for (const auto& c : cast) {
    auto again = expand(parse_family(c.line(), "--case"), claims, ExpandOptions{});
    ASSERT_EQ(again.size(), 1u) << c.line();
    EXPECT_EQ(again[0].line(), c.line());
  }
  // An explicit key dtype expands to the reference's signatures of that key.
  EXPECT_EQ(cases_of("op=dx.cast shapes=[7] dtypes=f32").size(), 2u);
  EXPECT_EQ(cases_of("op=dx.cast shapes=[7] dtypes=f32->i32").size(), 1u);
}

TEST(CertifyOpsV1, SplitPicksTheKernelWithTheRightOutputCount) {
  auto equal = cases_of("op=dx.split shapes=[6,4]");  // 1, 2, 3, 6 equal parts
  ASSERT_EQ(equal.size(), 4u);
  auto sized = cases_of("op=dx.split shapes=[6,4] attrs=sizes:[1,2,3]");
  ASSERT_EQ(sized.size(), 1u);
  EXPECT_EQ(parse_signature(sized[0].sig)->outputs.size(), 3u);
  auto out = specs("dx.split", {{6, 4}}, "f32->f32:f32:f32", "sizes:[1,2,3]");
  EXPECT_EQ(out_shapes(out), (std::vector<Shape>{{1, 4}, {2, 4}, {3, 4}}));
  EXPECT_FALSE(specs("dx.split", {{6, 4}}, "f32->f32:f32", "sizes:[1,2]").error.empty());
}

TEST(CertifyOpsV1, OptionalAndVariadicInputs) {
  auto lin = cases_of("op=dx.linear shapes=[2,3];[4,3];none,[2,3];[4,3];[4]");
  ASSERT_EQ(lin.size(), 2u);
  EXPECT_TRUE(is_absent(lin[0].shapes[2]));
  EXPECT_NE(lin[0].line().find("shapes=[2,3];[4,3];none"), std::string::npos);
  EXPECT_EQ(out_shapes(specs("dx.linear", {{2, 5, 3}, {4, 3}, kAbsentShape}, "f32:f32:f32->f32")),
            (std::vector<Shape>{{2, 5, 4}}));
  EXPECT_FALSE(specs("dx.linear", {{2, 3}, {4, 3}, {5}}, "f32:f32:f32->f32").error.empty());
  auto cat = cases_of("op=dx.concat shapes=[2];[3];[4],[1] attrs=axis:0");
  ASSERT_EQ(cat.size(), 2u);
  EXPECT_EQ(cat[0].shapes.size(), 3u);
  EXPECT_EQ(out_shapes(specs("dx.concat", {{2, 3}, {2, 5}}, "f32->f32", "axis:1")), (std::vector<Shape>{{2, 8}}));
  EXPECT_FALSE(specs("dx.concat", {{}, {}}, "f32->f32").error.empty());
}

TEST(CertifyOpsV1, AutomaticBackwardCases) {
  auto relu = cases_of("op=dx.relu shapes=[7]", true);
  ASSERT_EQ(relu.size(), 2u);
  EXPECT_EQ(relu[1].mode, "backward");
  EXPECT_EQ(relu[1].display_op(), "dx.relu/backward");
  EXPECT_NE(relu[1].line().find("mode=backward"), std::string::npos);
  // An unwanted-gradient variant for ops with two or more inputs; none for special data.
  auto lin = cases_of("op=dx.linear shapes=[2,3];[4,3];[4]", true);
  ASSERT_EQ(lin.size(), 3u);
  EXPECT_EQ(lin[2].mode, "backward:011");
  EXPECT_EQ(cases_of("op=dx.relu shapes=[7] tier=special", true).size(), 1u);
  EXPECT_EQ(cases_of("op=dx.where shapes=[3];[3];[3]", true).size(), 4u);  // f32: + backward, + partial; i8: forward
  EXPECT_THROW(cases_of("op=dx.relu shapes=[7] mode=sideways"), ManifestError);
}

TEST(CertifyOpsV1, ShapeRulesOfTheSecondOpSet) {
  EXPECT_EQ(out_shapes(specs("dx.layer_norm", {{2, 3, 5}, {3, 5}, kAbsentShape}, "f32:f32:f32->f32:f32:f32", "axis:1")),
            (std::vector<Shape>{{2, 3, 5}, {2, 1, 1}, {2, 1, 1}}));
  EXPECT_FALSE(specs("dx.layer_norm", {{2, 3}, {3}, {3}}, "f32:f32:f32->f32:f32:f32", "axis:2").error.empty());
  EXPECT_FALSE(specs("dx.batch_norm", {{4, 3}, kAbsentShape, kAbsentShape, kAbsentShape, kAbsentShape},
                     "f32:f32:f32:f32:f32->f32")
                   .error.empty());  // evaluation needs running stats
  EXPECT_EQ(out_shapes(specs("dx.embedding", {{10, 4}, {2, 3}}, "f32:i32->f32")), (std::vector<Shape>{{2, 3, 4}}));
  EXPECT_EQ(out_shapes(specs("dx.cross_entropy", {{4, 7}, {4}}, "f32:i64->f32", "reduction:str:none")),
            (std::vector<Shape>{{4}}));
  EXPECT_EQ(out_shapes(specs("dx.cross_entropy", {{4, 7}, {4}}, "f32:i64->f32")), (std::vector<Shape>{{}}));
  EXPECT_EQ(out_shapes(specs("dx.conv2d", {{2, 3, 7, 6}, {4, 3, 3, 3}, {4}}, "f32:f32:f32->f32", "stride:[2,1];padding:[1,0]")),
            (std::vector<Shape>{{2, 4, 4, 4}}));
  EXPECT_EQ(out_shapes(specs("dx.conv2d", {{1, 4, 5, 5}, {6, 2, 3, 3}, kAbsentShape}, "f32:f32:f32->f32", "groups:2;dilation:2")),
            (std::vector<Shape>{{1, 6, 1, 1}}));
  EXPECT_EQ(out_shapes(specs("dx.max_pool2d", {{2, 3, 7, 6}}, "f32->f32", "kernel:3;stride:2;padding:1")),
            (std::vector<Shape>{{2, 3, 4, 3}}));
  EXPECT_FALSE(specs("dx.avg_pool2d", {{2, 3, 4, 4}}, "f32->f32", "none").error.empty());  // kernel is required
  EXPECT_EQ(out_shapes(specs("dx.scaled_dot_product_attention", {{2, 5, 8}, {2, 7, 8}, {2, 7, 3}, {5, 7}}, "f32:f32:f32:bool->f32")),
            (std::vector<Shape>{{2, 5, 3}}));
  EXPECT_EQ(out_shapes(specs("dx.reshape", {{2, 3}}, "f32->f32", "none", {{3, 2}})), (std::vector<Shape>{{3, 2}}));
  EXPECT_FALSE(specs("dx.reshape", {{2, 3}}, "f32->f32", "none", {{7}}).error.empty());
  EXPECT_EQ(out_shapes(specs("dx.broadcast_to", {{3, 1}}, "f32->f32", "none", {{2, 3, 5}})), (std::vector<Shape>{{2, 3, 5}}));
  EXPECT_EQ(out_shapes(specs("dx.slice", {{10}}, "f32->f32", "starts:[-3]")), (std::vector<Shape>{{3}}));
  EXPECT_EQ(out_shapes(specs("dx.slice", {{6, 7}}, "f32->f32", "starts:[1,2];stops:[5,7];steps:[2,3]")),
            (std::vector<Shape>{{2, 2}}));
  EXPECT_EQ(out_shapes(specs("dx.index_select", {{5, 4}, {7}}, "f32:i32->f32", "axis:-1")), (std::vector<Shape>{{5, 7}}));
  EXPECT_EQ(out_shapes(specs("dx.gather", {{4, 5}, {4, 9}}, "f32:i64->f32", "axis:1")), (std::vector<Shape>{{4, 9}}));
  EXPECT_FALSE(specs("dx.gather", {{4, 5}, {4, 9}}, "f32:i64->f32", "axis:0").error.empty());
  EXPECT_EQ(out_shapes(specs("dx.pad", {{3, 4}}, "f32->f32", "pads:[1,2,0,3]")), (std::vector<Shape>{{6, 7}}));
  EXPECT_EQ(out_shapes(specs("dx.tile", {{2, 3}}, "f32->f32", "repeats:[3,1,2]")), (std::vector<Shape>{{3, 2, 6}}));
  EXPECT_EQ(out_shapes(specs("dx.dropout", {{3, 4}}, "f32->f32:bool")), (std::vector<Shape>{{3, 4}, {3, 4}}));
  EXPECT_EQ(specs("dx.dropout", {{3, 4}}, "f32->f32:bool").outputs[1].dtype, DType::Bool);
  EXPECT_EQ(out_shapes(specs("dx.arange", {{3, 4}}, "->i32")), (std::vector<Shape>{{3, 4}}));
  EXPECT_EQ(mutated_inputs("dx.batch_norm", {{4, 3}, {3}, {3}, {3}, {3}}, parse_attrs("training:true")),
            (std::vector<int>{3, 4}));
  EXPECT_TRUE(mutated_inputs("dx.batch_norm", {{4, 3}, {3}, {3}, {3}, {3}}, parse_attrs("none")).empty());
}

TEST(CertifyOpsV1, IndexInputsInRangeAndBadIndexTier) {
  const std::vector<Shape> shapes{{5, 4}, {100}};
  const int64_t limit = index_limit("dx.index_select", 1, shapes, parse_attrs("axis:1"));
  EXPECT_EQ(limit, 4);
  EXPECT_EQ(index_limit("dx.embedding", 1, {{10, 3}, {7}}, {}), 10);
  EXPECT_EQ(index_limit("dx.cross_entropy", 1, {{4, 7}, {4}}, {}), 7);
  EXPECT_EQ(index_limit("dx.add", 1, {{4}, {4}}, {}), -1);
  GenRequest g{"dx.index_select", DType::I64, "real", 1, 9, 100, 1};
  g.index_limit = limit;
  auto bytes = generate(g);
  for (int i = 0; i < 100; ++i) {
    const int64_t v = load_int(DType::I64, bytes.data() + 8 * i);
    EXPECT_TRUE(v >= 0 && v < 4) << v;
  }
  g.tier = "badindex";
  bytes = generate(g);
  int bad = 0;
  for (int i = 0; i < 100; ++i) {
    const int64_t v = load_int(DType::I64, bytes.data() + 8 * i);
    bad += v < 0 || v >= 4;
  }
  EXPECT_EQ(bad, 1);
  // cross_entropy labels: some rows hit ignore_index.
  GenRequest labels{"dx.cross_entropy", DType::I64, "real", 1, 3, 200, 1};
  labels.index_limit = 7;
  labels.plant_ignore = true;
  bytes = generate(labels);
  int ignored = 0;
  for (int i = 0; i < 200; ++i) ignored += load_int(DType::I64, bytes.data() + 8 * i) == -100;
  EXPECT_GT(ignored, 10);
}

TEST(CertifyTolerances, ClassesOfTheSecondOpSetAndBackward) {
  EXPECT_EQ(tolerance_for("dx.uniform", DType::F32, "real").rule, Rule::BitExact);
  EXPECT_EQ(tolerance_for("dx.reshape", DType::BF16, "real").rule, Rule::BitExact);
  EXPECT_EQ(tolerance_for("dx.conv2d", DType::F32, "real").rule, Rule::ErrorBound);
  EXPECT_EQ(tolerance_for("dx.layer_norm", DType::F16, "real").rule, Rule::RtolAtol);
  EXPECT_EQ(tolerance_for("dx.tanh", DType::F32, "real").ulps, 8);
  EXPECT_EQ(tolerance_for("dx.exp", DType::F32, "real").ulps, 4);
  EXPECT_EQ(tolerance_for("dx.relu", DType::F32, "real", true).rule, Rule::BitExact);
  EXPECT_EQ(tolerance_for("dx.matmul", DType::F32, "exact", true).rule, Rule::ErrorBound);
  EXPECT_EQ(tolerance_for("dx.softmax", DType::F32, "real", true).rule, Rule::RtolAtolNormwise);
  EXPECT_EQ(tolerance_for("dx.exp", DType::F32, "real", true).rule, Rule::RtolAtol);
  EXPECT_EQ(std::string(backward_class("dx.exp")), "grad_transcendental");
  EXPECT_FALSE(tolerance_for("dx.add", DType::F32, "real").relaxed);
  for (const auto& r : relaxations()) EXPECT_GT(std::string(r.reason).size(), 20u) << r.op;  // a reason is mandatory
}

// The production core applies exactly the published relaxations (the test-only table of
// deepx-certify-relaxation-fixture is linked nowhere else), and a relaxation names itself the
// same way in the case's threshold source, the reports and the certificate.
TEST(CertifyTolerances, ProductionAppliesThePublishedRelaxationsOnly) {
  EXPECT_EQ(&relaxations(), &published_relaxations());
  for (const auto& r : published_relaxations()) {
    const Tolerance t = tolerance_for(r.op, *dtype_from_name(std::string(r.dtypes).substr(0, std::string(r.dtypes).find(','))),
                                      "real", std::string(r.direction) == "backward");
    EXPECT_TRUE(t.relaxed);
    EXPECT_EQ(t.source, relaxation_source(r));
  }
  const Relaxation example{"dx.exp", "f32", "forward", Rule::Ulp, 8, 0, 0, 0, 0, 0, "a reason a reviewer can check"};
  EXPECT_EQ(relaxation_title(example), "dx.exp f32 forward <= 8 ulp");
  EXPECT_EQ(relaxation_source(example), "relaxation dx.exp f32 forward <= 8 ulp: a reason a reviewer can check");
}

TEST(CertifyTolerances, PublishedPageMatchesTheTable) {
  std::ifstream in(DEEPX_TOLERANCES_DOC);
  ASSERT_TRUE(in) << DEEPX_TOLERANCES_DOC;
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  const std::string begin = "<!-- BEGIN GENERATED: deepx-certify --print-tolerances -->\n";
  const std::string end = "<!-- END GENERATED -->";
  const size_t b = doc.find(begin), e = doc.find(end);
  ASSERT_NE(b, std::string::npos);
  ASSERT_NE(e, std::string::npos);
  EXPECT_EQ(doc.substr(b + begin.size(), e - b - begin.size()), tolerance_table_markdown())
      << "docs/tolerances.md is out of date: regenerate its table with `deepx-certify --print-tolerances`";
}
