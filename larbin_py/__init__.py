"""larbin_py: a fast, polite, single-process web crawler in the design of Larbin."""

__version__ = "0.1.0"
