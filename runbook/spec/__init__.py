"""Runbook specs: the model (frozen dataclasses), the loader (YAML -> model, pure) and
inspection (every problem in a file, with its path and line).

::

    from runbook.spec import load_file, resolve
    runbook = load_file(resolve("nccl-init-failure"))   # SpecError(issues=[...]) if invalid
"""

from runbook.spec.inspect import Issue
from runbook.spec.loader import inspect_text, load_file, load_text, resolve, shipped
from runbook.spec.models import (
    DEFAULT_TIMEOUT,
    END,
    ROOT_CAUSES,
    Collect,
    Remedy,
    Rule,
    RuleOut,
    Runbook,
    Stage,
)

__all__ = [
    "DEFAULT_TIMEOUT",
    "END",
    "ROOT_CAUSES",
    "Collect",
    "Issue",
    "Remedy",
    "Rule",
    "RuleOut",
    "Runbook",
    "Stage",
    "inspect_text",
    "load_file",
    "load_text",
    "resolve",
    "shipped",
]
