"""The command line: click modules that parse flags, call the library and render."""

from runbook.cli.app import cli, main

__all__ = ["cli", "main"]
