// The relaxation table of deepx-certify: exactly the published one (compare.cpp). It is a
// translation unit of its own so that a test-only runner can link another table
// (tests/relaxation_fixture_table.cpp) without any switch that a production run could flip.
#include "compare.hpp"

namespace deepx::conformance {

const std::vector<Relaxation>& relaxations() { return published_relaxations(); }

}  // namespace deepx::conformance
