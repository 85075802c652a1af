"""``python -m larbin_py.config --markdown``: print docs/configuration.md, the key
reference made from the schema (larbin_py.config.reference).

Anything else is a one-line error on stderr, exit 2.
"""

from __future__ import annotations

import sys

from .reference import COMMAND, markdown

USAGE = f"usage: {COMMAND}"


def main(argv: list[str]) -> int:
    if argv in (["-h"], ["--help"]):
        print(USAGE)
        return 0
    if argv != ["--markdown"]:
        got = " ".join(argv) or "nothing"
        print(f"python -m larbin_py.config: expected --markdown, got {got!r} ({USAGE})", file=sys.stderr)
        return 2
    sys.stdout.write(markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
