// deepx-certify: certifies a plugin against the reference plugin. See conformance/README.md.
// The command line is cli.cpp, the run certify.cpp, the reports reports.cpp and terminal.cpp.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "certify.hpp"
#include "cli.hpp"
#include "compare.hpp"

using namespace deepx::conformance;

int main(int argc, char** argv) {
  Options options;
  const int status = parse_command_line(argc, argv, options, std::cout, std::cerr);
  if (status != kContinue) return status;
  if (options.print_tolerances) {
    std::printf("%s", tolerance_table_markdown().c_str());
    return kExitCertified;
  }
  return certify(options, std::vector<std::string>(argv, argv + argc));
}
