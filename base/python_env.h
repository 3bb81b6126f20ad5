// Where the `shoal` Python package built beside this binary lives, so that
// processes shoal starts (workers, and the programs of `shoal launch`) can
// `import shoal` without an install step.
#ifndef SHOAL_BASE_PYTHON_ENV_H_
#define SHOAL_BASE_PYTHON_ENV_H_

#include <string>

namespace shoal {

// The folder holding shoal/__init__.py and shoal/_shoal.so next to this
// executable: the one Bazel assembles (<bin>/python/site for
// <bin>/tools/shoal), or the site-packages of an installed wheel, which
// carries this binary as <site-packages>/shoal/_bin/shoal; "" if neither.
std::string BundledPythonPackageDir();

// `pythonpath` (a PYTHONPATH value, may be empty) with the bundled package's
// folder appended unless it is absent or already there.
std::string PythonPathWithBundledPackage(const std::string& pythonpath);

}  // namespace shoal

#endif  // SHOAL_BASE_PYTHON_ENV_H_
