"""``python -m larbin_py`` and the ``larbin`` console script (see larbin_py.cli)."""

from larbin_py.cli import exit_now, main

__all__ = ["main", "console"]


def console() -> None:
    """The console script: :func:`larbin_py.cli.main`, then :func:`larbin_py.cli.exit_now`."""
    exit_now(main())


if __name__ == "__main__":
    console()
