// `shoal bench torch`: torch.distributed with backend "shoal" beside "gloo"
// (tools/bench/python/shoal_bench/torch_dist.py), run with the shoal package
// built beside this binary by the interpreter the build is for
// (SHOAL_BENCH_PYTHON_DEFAULT:
// @shoal_python's, e.g. a venv's python with torch 2.x; the environment's
// SHOAL_BENCH_PYTHON overrides it), and this binary for the
// `shoal bench collective` comparison.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/python_env.h"
#include "base/subprocess.h"

#ifndef SHOAL_BENCH_PYTHON_DEFAULT
#define SHOAL_BENCH_PYTHON_DEFAULT "/usr/bin/python3"
#endif

namespace shoal::bench {

int TorchBench(int argc, char** argv) {
  const char* own = std::getenv("PYTHONPATH");
  const std::string path =
      PythonPathWithBundledPackage(own != nullptr ? own : "");
  if (path.empty()) {
    std::fprintf(stderr,
                 "shoal bench torch: no shoal Python package beside this "
                 "binary: build //python:site in the same configuration, or "
                 "set PYTHONPATH\n");
    return 1;
  }
  setenv("PYTHONPATH", path.c_str(), 1);
  setenv("SHOAL_BIN", SelfExePath().c_str(), 0);
  const char* chosen = std::getenv("SHOAL_BENCH_PYTHON");
  const char* python = chosen != nullptr && chosen[0] != '\0'
                           ? chosen
                           : SHOAL_BENCH_PYTHON_DEFAULT;
  if (access(python, X_OK) != 0) python = "python3";
  std::vector<char*> args = {const_cast<char*>(python), const_cast<char*>("-m"),
                             const_cast<char*>("shoal_bench.torch_dist")};
  for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  execvp(python, args.data());
  std::perror("shoal bench torch: exec");
  return 1;
}

}  // namespace shoal::bench
