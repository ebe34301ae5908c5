#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "data_gen.hpp"
#include "manifest.hpp"
#include "shape_rules.hpp"

using namespace deepx::conformance;

namespace {
std::vector<DtypeDevice> two_dtypes(const std::string&) { return {{"f32", "cpu"}, {"i32", "cpu"}}; }
int arity(const std::string& op) {
  const OpRule* r = find_op_rule(op);
  return r ? r->inputs : -1;
}
}  // namespace

TEST(CertifyManifest, SplitsOutsideBrackets) {
  auto parts = split_top_level("[3,4];[4], [1,2] ,x", ',');
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0], "[3,4];[4]");
  EXPECT_EQ(parts[1], "[1,2]");
  EXPECT_EQ(parts[2], "x");
  EXPECT_THROW(split_top_level("[3,4", ','), ManifestError);
}

TEST(CertifyManifest, Shapes) {
  EXPECT_EQ(parse_shape("[]"), Shape{});
  EXPECT_EQ(parse_shape("[0, 3]"), (Shape{0, 3}));
  EXPECT_EQ(format_shape({7, 1}), "[7,1]");
  EXPECT_THROW(parse_shape("3,4"), ManifestError);
  EXPECT_THROW(parse_shape("[-1]"), ManifestError);
}

TEST(CertifyManifest, AttrsRoundTrip) {
  auto attrs = parse_attrs("axes:[0,-1];keepdims:true;value:f64:3;scale:2.5;n:7;v:-inf");
  ASSERT_EQ(attrs.size(), 6u);
  EXPECT_EQ(attrs[0].value.kind, AttrValue::Kind::I64Array);
  EXPECT_EQ(attrs[0].value.i64s, (std::vector<int64_t>{0, -1}));
  EXPECT_EQ(attrs[1].value.kind, AttrValue::Kind::Bool);
  EXPECT_EQ(attrs[2].value.kind, AttrValue::Kind::F64);
  EXPECT_EQ(attrs[2].value.f64, 3.0);
  EXPECT_EQ(attrs[3].value.kind, AttrValue::Kind::F64);
  EXPECT_EQ(attrs[4].value.kind, AttrValue::Kind::I64);
  EXPECT_EQ(attrs[5].value.f64, -INFINITY);
  EXPECT_EQ(format_attrs(attrs), "axes:[0,-1];keepdims:true;value:f64:3;scale:2.5;n:7;v:-inf");
  EXPECT_EQ(format_attrs(parse_attrs(format_attrs(attrs))), format_attrs(attrs));
  EXPECT_TRUE(parse_attrs("none").empty());
  EXPECT_THROW(parse_attrs("axes"), ManifestError);
  EXPECT_THROW(parse_attrs("a:1;a:2"), ManifestError);
}

TEST(CertifyManifest, ExpandsCartesianProduct) {
  Family f = parse_family(
      "op=dx.add,dx.mul shapes=[3,4];[4],[7];[7] layouts=contig,offset;transposed tier=exact,real seeds=1,2",
      "test:1");
  auto cases = expand(f, two_dtypes, arity);
  // 2 ops x 2 dtypes x 2 shapes x 2 layouts x 2 tiers x 2 seeds
  EXPECT_EQ(cases.size(), 64u);
  EXPECT_EQ(cases[0].layouts, (std::vector<std::string>{"contig", "contig"}));
  EXPECT_EQ(cases[0].source, "test:1");
}

TEST(CertifyManifest, DefaultDtypesAreTheClaims) {
  auto cases = expand(parse_family("op=dx.neg shapes=[5]", "t"), two_dtypes, arity);
  ASSERT_EQ(cases.size(), 2u);
  EXPECT_EQ(cases[0].dtype, "f32");
  EXPECT_EQ(cases[1].dtype, "i32");
  // An explicit unclaimed dtype still yields a case (it will be NOT_SUPPORTED).
  cases = expand(parse_family("op=dx.neg shapes=[5] dtypes=f16", "t"), two_dtypes, arity);
  ASSERT_EQ(cases.size(), 1u);
  EXPECT_EQ(cases[0].dtype, "f16");
  EXPECT_EQ(cases[0].device, "cpu");
}

TEST(CertifyManifest, TiersThatDoNotApplyAreDropped) {
  auto claims = [](const std::string&) { return std::vector<DtypeDevice>{{"bool", "cpu"}, {"i8", "cpu"}}; };
  auto cases = expand(parse_family("op=dx.copy shapes=[5] tier=exact,real,large", "t"), claims, arity);
  // bool: one tier (exact); i8: exact and real ("large" is float-only).
  ASSERT_EQ(cases.size(), 3u);
}

TEST(CertifyManifest, CanonicalLineReparsesToTheSameCase) {
  auto cases = expand(parse_family("op=dx.sum shapes=[3,0,5] layouts=sliced attrs=axes:[-1];keepdims:true "
                                   "tier=special seeds=9",
                                   "t"),
                      two_dtypes, arity);
  ASSERT_FALSE(cases.empty());
  for (const auto& c : cases) {
    auto again = expand(parse_family(c.line(), "--case"), two_dtypes, arity);
    ASSERT_EQ(again.size(), 1u);
    EXPECT_EQ(again[0].line(), c.line());
  }
}

TEST(CertifyManifest, Errors) {
  EXPECT_THROW(parse_family("shapes=[3]", "t"), ManifestError);            // no op
  EXPECT_THROW(parse_family("op=dx.add shapes=[3] bogus=1", "t"), ManifestError);
  EXPECT_THROW(expand(parse_family("op=dx.add shapes=[3]", "t"), two_dtypes, arity), ManifestError);  // 1 shape
  EXPECT_THROW(expand(parse_family("op=dx.nope shapes=[3]", "t"), two_dtypes, arity), ManifestError);
  EXPECT_THROW(expand(parse_family("op=dx.add shapes=[3];[3] layouts=a;b;c", "t"), two_dtypes, arity),
               ManifestError);
  EXPECT_THROW(expand(parse_family("op=dx.neg shapes=[3] tier=weird", "t"), two_dtypes, arity), ManifestError);
}

TEST(CertifyManifest, CommentsAndBlankLines) {
  auto fams = parse_manifest("# comment\n\n  op=dx.neg shapes=[1]\n#x\nop=dx.exp shapes=[2]\n", "m.txt");
  ASSERT_EQ(fams.size(), 2u);
  EXPECT_EQ(fams[1].source, "m.txt:5");
}

TEST(CertifyManifest, BundledManifestsParse) {
  auto all = [](const std::string& op) {
    std::vector<DtypeDevice> out;
    for (const char* d : {"f64", "f32", "f16", "bf16", "i64", "i32", "i16", "i8", "u8", "bool"}) {
      if (op == "dx.matmul" && std::string(d) != "f32" && std::string(d) != "i8") continue;
      out.push_back({d, "cpu"});
    }
    return out;
  };
  size_t total = 0;
  for (const auto& e : std::filesystem::directory_iterator(DEEPX_CONFORMANCE_SOURCE_CASES_DIR)) {
    std::ifstream in(e.path());
    std::stringstream ss;
    ss << in.rdbuf();
    for (const auto& fam : parse_manifest(ss.str(), e.path().filename().string())) total += expand(fam, all, arity).size();
  }
  EXPECT_GT(total, 100u);
}

TEST(CertifyDataGen, DeterministicAndKeyed) {
  GenRequest g{"dx.add", DType::F32, "real", 0, 42, 1000, 1};
  auto a = generate(g), b = generate(g);
  EXPECT_EQ(a, b);
  g.key = 43;
  EXPECT_NE(a, generate(g));
  // Known value: the generator is part of the suite's definition (same on every machine).
  EXPECT_EQ(counter_random(0, 0, 0), counter_random(0, 0, 0));
  EXPECT_NE(counter_random(0, 0, 0), counter_random(0, 0, 1));
}

TEST(CertifyDataGen, ExactTierIsSmallIntegers) {
  GenRequest g{"dx.matmul", DType::BF16, "exact", 0, 1, 4096, 257};
  auto bytes = generate(g);
  for (int i = 0; i < 4096; ++i) {
    double v = load_double(DType::BF16, bytes.data() + 2 * i);
    EXPECT_EQ(v, std::trunc(v));
    EXPECT_LE(std::fabs(v), 8.0);
  }
  EXPECT_EQ(exact_magnitude("dx.matmul", DType::F32, 1 << 20), 2);
}

TEST(CertifyDataGen, IntegerDivisorsAreNonZeroUnlessAsked) {
  for (auto tier : {"exact", "real", "special"}) {
    GenRequest g{"dx.div", DType::I8, tier, 1, 5, 5000, 1};
    auto bytes = generate(g);
    for (auto b : bytes) EXPECT_NE(b, 0) << tier;
  }
  GenRequest g{"dx.div", DType::I32, "divzero", 1, 5, 70, 1};
  auto bytes = generate(g);
  EXPECT_EQ(load_int(DType::I32, bytes.data()), 0);
}

TEST(CertifyDataGen, AllBitsEnumeratesHalfPatterns) {
  GenRequest g{"dx.exp", DType::F16, "allbits", 0, 9, 65536, 1};
  auto bytes = generate(g);
  for (uint32_t i = 0; i < 65536; i += 257) EXPECT_EQ(load_bits(DType::F16, bytes.data() + 2 * i), i);
  auto claims = [](const std::string&) { return std::vector<DtypeDevice>{{"f32", "cpu"}, {"bf16", "cpu"}}; };
  auto cases = expand(parse_family("op=dx.neg shapes=[65536] tier=allbits", "t"), claims, arity);
  ASSERT_EQ(cases.size(), 1u);
  EXPECT_EQ(cases[0].dtype, "bf16");
}
