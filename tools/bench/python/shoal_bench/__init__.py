"""shoal's Python benchmarks, apart from the shoal package: `shoal bench
python` runs this package (`python3 -m shoal_bench`), `shoal bench torch`
its torch_dist module and `shoal bench dataloader` its dataloader module.
//python:site puts it beside the package (bazel-bin/python/site/shoal_bench)
so that workers import its task functions (shoal_bench.tasks); a wheel
leaves it out. docs/BENCHMARKS.md has the figures."""
