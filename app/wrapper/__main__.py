"""`python -m app.wrapper torchrun ARGS...`: run the wrapper outside a pod (e.g. dry run)."""

from __future__ import annotations

import sys

from app.wrapper.torchrun import main

if __name__ == "__main__":
    args = sys.argv[1:]
    if args and args[0] == "torchrun":
        args = args[1:]
    sys.exit(main(args))
