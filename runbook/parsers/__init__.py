"""Pure parsers, one module per evidence source. A runbook names a parser (`parse: dmesg`);
`get` imports its module the first time it is asked for (registry.BUILTIN)."""

from runbook.parsers.registry import ParserEntry, get, names, register

__all__ = ["ParserEntry", "get", "names", "register"]
