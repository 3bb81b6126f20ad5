#!/usr/bin/env python3
"""shoal's knobs: the SHOAL_* environment variables declared in base/knobs.inc.

  tools/knobs.py --markdown   prints docs/env.md
  tools/knobs.py --check      fails when docs/env.md is not what --markdown
                              prints, when code reads a SHOAL_* variable that
                              is not declared, or when a declared one is read
                              nowhere

Run from the repository root.
"""

import argparse
import re
import subprocess
import sys

INC = "base/knobs.inc"
DOC = "docs/env.md"

_KNOB = re.compile(
    r'SHOAL_KNOB\(\s*(SHOAL_[A-Z0-9_]+)\s*,\s*(\w+)\s*,\s*(\w+)\s*,\s*'
    r'"((?:[^"\\]|\\.)*)"\s*,\s*"((?:[^"\\]|\\.)*)"\s*\)', re.S)
_WHO = {
    "user": "For users",
    "tuning": "Tuning (the defaults are right for most machines)",
    "internal": "Set by shoal for the processes it starts",
    "test": "Read by shoal's own tests, benchmarks and tools",
}
# A SHOAL_* name in code: a string literal (C++, Python) or a shell expansion.
_READ = {
    ".cc": re.compile(r'"(SHOAL_[A-Z0-9_]+)"'),
    ".h": re.compile(r'"(SHOAL_[A-Z0-9_]+)"'),
    ".py": re.compile(r'["\'](SHOAL_[A-Z0-9_]+)["\']'),
    ".sh": re.compile(r'\$\{?(SHOAL_[A-Z0-9_]+)'),
}
_SHELL_SCRIPTS = {"tools/test", "tools/setup", "tools/gpu_bundle", ".ci/run"}


def knobs():
    text = open(INC).read()
    found = _KNOB.findall(text)
    declared = text.count("SHOAL_KNOB(") - 1  # the format line in the comment
    if len(found) != declared:
        sys.exit(f"{INC}: {declared} SHOAL_KNOB lines, {len(found)} parsed")
    return found


def markdown():
    out = ["# Environment variables",
           "",
           "Every `SHOAL_*` variable shoal reads, made from `base/knobs.inc` by",
           "`tools/knobs.py --markdown` (tools/test checks that this page and the",
           "code agree). Flags of `shoal start` and `shoal launch` are in their",
           "`--help` and in [tasks.md](tasks.md) and [launch.md](launch.md).",
           ""]
    by_who = {}
    for name, who, kind, default, doc in knobs():
        by_who.setdefault(who, []).append((name, kind, default, doc))
    for who, title in _WHO.items():
        if who not in by_who:
            continue
        out += [f"## {title}", "", "| variable | type | default | what |",
                "|---|---|---|---|"]
        for name, kind, default, doc in by_who[who]:
            d = f"`{default}`" if default else ""
            out.append(f"| `{name}` | {kind} | {d} | {doc} |")
        out.append("")
    return "\n".join(out)


def reads():
    files = subprocess.run(["git", "ls-files"], capture_output=True, text=True,
                           check=True).stdout.split()
    names = {}
    for f in files:
        if f == INC or f.startswith("docs/") or f.endswith(".md"):
            continue
        ext = "." + f.rsplit(".", 1)[-1] if "." in f.rsplit("/", 1)[-1] else ""
        pattern = _READ.get(ext) or (_READ[".sh"] if f in _SHELL_SCRIPTS
                                     else None)
        if pattern is None:
            continue
        try:
            text = open(f, errors="replace").read()
        except OSError:
            continue
        for name in pattern.findall(text):
            names.setdefault(name, f)
    return names


def check():
    problems = []
    if open(DOC).read().rstrip("\n") != markdown().rstrip("\n"):
        problems.append(f"{DOC} is not what tools/knobs.py --markdown prints: "
                        f"run tools/knobs.py --markdown > {DOC}")
    declared = {k[0] for k in knobs()}
    used = reads()
    for name, where in sorted(used.items()):
        if name not in declared:
            problems.append(f"{where} reads {name}, not declared in {INC}")
    for name in sorted(declared - set(used)):
        problems.append(f"{INC} declares {name}, which no code reads")
    return problems


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--markdown", action="store_true")
    g.add_argument("--check", action="store_true")
    a = p.parse_args()
    if a.markdown:
        print(markdown())
        return 0
    problems = check()
    for line in problems:
        print(line, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
