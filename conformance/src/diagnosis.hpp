// What went wrong in a failing case, in words: the class of the defect, so that a vendor reads
// "never written" or "depends on the input layout" instead of guessing from a value.
#pragma once

#include <string>
#include <vector>

#include "run_record.hpp"
#include "runner.hpp"

namespace deepx::conformance {

enum class Defect {
  kNone,              // not a failure, or nothing more to say
  kWrongValue,        // an output element outside the tolerance
  kNeverWritten,      // the output still holds the runner's fill pattern there
  kWrittenOutside,    // a write outside the output view (into the guard region) or to an input
  kLayoutDependent,   // wrong with this input/output layout, right with every tensor compact
  kNondeterministic,  // identical runs gave different bits
  kCrash,             // the worker running the case died
  kTimeout,           // the case ran longer than the limit
};

// "never written", "depends on the input layout", ... (the class's name in reports).
const char* defect_name(Defect d);

// The class of a result from what the result itself says (never kLayoutDependent: that takes a
// rerun, see diagnose()).
Defect classify(const Case& c, const CaseResult& r);

// Classifies every failing outcome and writes its `diagnosis` line ("never written: output
// element 3 still holds the fill pattern 0xA5..."). Wrong values of a case with a non-compact
// layout are rerun with every tensor compact, in a forked worker (isolation.hpp), up to
// `max_reruns` of them: a case that then passes depends on its layout (stride-0 broadcast,
// offset, strided or transposed views), and says which.
void diagnose(const Environment& env, std::vector<Outcome>& outcomes, size_t max_reruns, double timeout_s);

}  // namespace deepx::conformance
