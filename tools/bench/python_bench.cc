// `shoal bench python`: the Python client benchmark
// (tools/bench/python/shoal_bench/__main__.py), run by Debian's interpreter
// with the shoal package built beside this binary and this binary as the node's
// workers.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/python_env.h"
#include "base/subprocess.h"

namespace shoal::bench {

int PythonBench(int argc, char** argv) {
  const char* own = std::getenv("PYTHONPATH");
  const std::string path =
      PythonPathWithBundledPackage(own != nullptr ? own : "");
  if (path.empty()) {
    std::fprintf(stderr,
                 "shoal bench python: no shoal Python package beside this "
                 "binary: build //python:site in the same configuration, or "
                 "set PYTHONPATH\n");
    return 1;
  }
  setenv("PYTHONPATH", path.c_str(), 1);
  setenv("SHOAL_BIN", SelfExePath().c_str(), 0);
  const char* python =
      access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
  std::vector<char*> args = {const_cast<char*>(python), const_cast<char*>("-m"),
                             const_cast<char*>("shoal_bench")};
  for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  execvp(python, args.data());
  std::perror("shoal bench python: exec");
  return 1;
}

}  // namespace shoal::bench
