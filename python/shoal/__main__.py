"""The `shoal` command from Python: `python -m shoal ARGS` and the `shoal`
console script that `pip install .` adds both run the shoal binary with ARGS
(the one _paths.shoal_binary finds, e.g. the wheel's shoal/_bin/shoal).

The binary replaces this process (exec): signals, the exit code and the
terminal are the binary's own, as if it had been run directly.
"""

import os
import sys

from . import _errors, _paths


def main(argv=None):
    """Execs the shoal binary with ARGV (default: sys.argv[1:]); returns only
    if that fails, with exit code 127 and the reason on stderr."""
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        # Not PATH's `shoal`: in a venv that is the console script itself.
        binary = _paths.shoal_binary(search_path=False)
        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(binary, [binary] + args)
    except (_errors.NotFoundError, OSError) as e:
        print(f"shoal: {e}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main())
