#!/usr/bin/env python3
"""torch's own distributed suite (DistributedTest, shipped inside torch) against
the "shoal" backend, with gloo as the reference in the same run.

  python distributed_suite.py [--world-size N] [-k EXPR] [--out DIR] ...

Runs dist_suite_child.py under pytest once per backend (gloo first, then
shoal; one after the other, so timing-sensitive tests do not compete), with
the interpreter that runs this script (its torch, its pytest), then compares:
every test that passes on gloo must pass on shoal, or be listed in the table
of docs/torch.md's section "torch's distributed suite" (a row
"| `test_name` | reason |"). Prints each backend's counts and the tests that
differ; exits 1 when a test passes on gloo, does not on shoal and is not
listed, or when a backend's run produced no results. A listed test that now
passes on shoal is printed as such (the list is then out of date); with
--strict that fails too.

The shoal package comes from PYTHONPATH (or --site): it must be built
against this interpreter's torch (tests/torch/suite.sh builds it and runs
this script in the torch 2.x venv).
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CHILD = os.path.join(HERE, "dist_suite_child.py")
DOC = os.path.join(ROOT, "docs", "torch.md")
SECTION = "## torch's distributed suite"


def listed_exclusions(doc_text, world_size, torch_version):
    """{test name: reason} from the exclusion table of SECTION in DOC_TEXT.

    A row is "| `test_name` | world sizes | reason |"; its world sizes are
    "all" or numbers separated by commas, optionally followed by
    "; torch X.Y" for a row that holds only on torch versions starting so.
    Only rows for WORLD_SIZE and TORCH_VERSION count.
    """
    out = {}
    in_section = False
    for line in doc_text.splitlines():
        if line.startswith("## "):
            in_section = line.strip() == SECTION
            continue
        if not in_section:
            continue
        m = re.match(r"^\|\s*`(test_\w+)`\s*\|\s*([^|]+?)\s*\|\s*(.+?)\s*\|\s*$",
                     line)
        if not m:
            continue
        sizes, _, only = m.group(2).partition(";")
        sizes, only = sizes.strip(), only.strip()
        if only and not torch_version.startswith(
                only.removeprefix("torch").strip()):
            continue
        if sizes != "all" and str(world_size) not in [
                s.strip() for s in sizes.split(",")]:
            continue
        out[m.group(1)] = m.group(3)
    return out


def outcomes(junit_path):
    """{test name: "passed" | "failed" | "skipped"} from a pytest junit XML
    file (an error counts as failed)."""
    result = {}
    tree = ET.parse(junit_path)
    for case in tree.iter("testcase"):
        name = case.get("name")
        state = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                state = "failed"
                break
            if child.tag == "skipped":
                state = "skipped"
        result[name] = state
    return result


def run_backend(backend, args, out_dir):
    """Runs the suite for BACKEND; returns (outcomes, seconds)."""
    junit = os.path.join(out_dir, f"{backend}-ws{args.world_size}.xml")
    log = os.path.join(out_dir, f"{backend}-ws{args.world_size}.log")
    env = dict(os.environ)
    if args.site:
        env["PYTHONPATH"] = os.pathsep.join(
            [args.site] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    temp_dir = tempfile.mkdtemp(prefix=f"shoal-dist-suite-{backend}-")
    env.update(BACKEND="gloo", WORLD_SIZE=str(args.world_size),
               TEMP_DIR=temp_dir, SHOAL_SUITE_BACKEND=backend,
               OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
           "-o", "addopts=", "-q", "-rN", f"--junitxml={junit}",
           "--rootdir", HERE, CHILD]
    if args.k:
        cmd += ["-k", args.k]
    print(f"distributed_suite: {backend}, world size {args.world_size}: "
          f"{' '.join(cmd[1:])} (log: {log})", flush=True)
    start = time.monotonic()
    with open(log, "w") as f:
        subprocess.run(cmd, env=env, stdout=f, stderr=subprocess.STDOUT,
                       cwd=HERE, check=False)
    seconds = time.monotonic() - start
    subprocess.run(["rm", "-rf", temp_dir], check=False)
    if not os.path.exists(junit):
        return None, seconds
    return outcomes(junit), seconds


def counts(result):
    c = {"passed": 0, "failed": 0, "skipped": 0}
    for state in result.values():
        c[state] += 1
    return c


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("-k", default="",
                   help="pytest -k expression: a subset of the tests")
    p.add_argument("--backends", default="gloo,shoal",
                   help="comma-separated; the comparison needs both")
    p.add_argument("--site", default="",
                   help="a folder put first on PYTHONPATH (the shoal package)")
    p.add_argument("--out", default="",
                   help="folder for the junit XML and logs (default: a temp "
                        "folder, kept)")
    p.add_argument("--strict", action="store_true",
                   help="also fail when a listed test passes on shoal")
    args = p.parse_args()

    if args.site:
        args.site = os.path.abspath(args.site)  # the children run elsewhere
    out_dir = os.path.abspath(
        args.out or tempfile.mkdtemp(prefix="shoal-dist-suite-"))
    os.makedirs(out_dir, exist_ok=True)
    import torch  # the interpreter's own: what the children run
    print(f"distributed_suite: torch {torch.__version__} "
          f"({os.path.dirname(torch.__file__)}), python "
          f"{sys.version.split()[0]}, results in {out_dir}", flush=True)

    results = {}
    status = 0
    for backend in args.backends.split(","):
        result, seconds = run_backend(backend, args, out_dir)
        if not result:
            print(f"distributed_suite: FAILED: {backend} produced no results "
                  f"(see {out_dir}/{backend}-ws{args.world_size}.log)")
            status = 1
            continue
        results[backend] = result
        c = counts(result)
        print(f"distributed_suite: {backend:5s} world size {args.world_size}: "
              f"{c['passed']} passed, {c['failed']} failed, {c['skipped']} "
              f"skipped ({seconds:.0f} s)", flush=True)

    if "gloo" not in results or "shoal" not in results:
        return status or 1
    gloo, shoal = results["gloo"], results["shoal"]
    with open(DOC, encoding="utf-8") as f:
        listed = listed_exclusions(f.read(), args.world_size,
                                   torch.__version__)
    regressed = sorted(t for t, s in gloo.items()
                       if s == "passed" and shoal.get(t) != "passed")
    unlisted = [t for t in regressed if t not in listed]
    for t in regressed:
        mark = "listed" if t in listed else "NOT LISTED"
        print(f"  gloo passed, shoal {shoal.get(t, 'absent')}: {t} ({mark}"
              + (f": {listed[t]}" if t in listed else "") + ")")
    only_shoal = sorted(t for t, s in shoal.items()
                        if s == "passed" and gloo.get(t) != "passed")
    for t in only_shoal:
        print(f"  shoal passed, gloo {gloo.get(t, 'absent')}: {t}")
    stale = sorted(t for t in listed if shoal.get(t) == "passed")
    for t in stale:
        print(f"  listed in docs/torch.md but passed on shoal: {t}")
    if unlisted:
        print(f"distributed_suite: FAILED: {len(unlisted)} test(s) pass on "
              f"gloo and not on shoal, and docs/torch.md does not list them: "
              f"{' '.join(unlisted)} (logs in {out_dir})")
        status = 1
    elif stale and args.strict:
        print("distributed_suite: FAILED: docs/torch.md lists tests that "
              "pass (--strict)")
        status = 1
    else:
        print(f"distributed_suite: ok: every test that passes on gloo passes "
              f"on shoal or is listed ({len(regressed)} listed)")
    return status


if __name__ == "__main__":
    sys.exit(main())
