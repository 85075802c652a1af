"""``python -m larbin_py`` and the ``larbin`` console script (see larbin_py.cli)."""

from larbin_py.cli import main

__all__ = ["main"]

if __name__ == "__main__":
    raise SystemExit(main())
