// TEST ONLY. The relaxation table of deepx-certify-relaxation-fixture: the published table plus
// one entry, so that the tests can drive the RELAXED path (verdict CERTIFIED-with-relaxations,
// RELAXED items in every report, the certificate's verdict line) against
// tests/relaxed_plugin.c, whose dx.exp f32 is 6 ulp off: beyond the published 4 ulp, within the
// 8 ulp granted here. Linked only into that test binary (never installed); deepx-certify links
// src/relaxation_table.cpp instead, so no flag or environment variable can relax a vendor's run.
#include "compare.hpp"

namespace deepx::conformance {

const std::vector<Relaxation>& relaxations() {
  static const std::vector<Relaxation> entries = [] {
    std::vector<Relaxation> all = published_relaxations();
    all.push_back({"dx.exp", "f32", "forward", Rule::Ulp, 8, 0, 0, 0, 0, 0,
                   "TEST FIXTURE ONLY (deepx-certify-relaxation-fixture): dx.exp f32 may be 8 ulp off, to prove "
                   "that a relaxation reaches every report and the certificate"});
    return all;
  }();
  return entries;
}

}  // namespace deepx::conformance
