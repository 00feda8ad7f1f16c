"""Values handed to Ansible as text, never as templates.

ansible-core templates a variable's value when a task uses it, and trusts what an extra-vars
file (`-e @file`) or an inventory holds. A value `runbook` passes on — a manifest's content, a
`--var`, a node or pod name read from evidence, a probe's command — may hold
`{{ lookup('pipe', …) }}`: templated, it would run on the controller. `unsafe_yaml` writes such
values with Ansible's `!unsafe` tag, its own mark for text that is never templated. PyYAML
cannot emit a custom tag for plain `str` without a subclass, hence this module. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml


class _Unsafe(str):
    """A string written with Ansible's `!unsafe` tag."""


class _UnsafeDumper(yaml.SafeDumper):
    pass


def _represent(dumper: yaml.SafeDumper, value: _Unsafe) -> yaml.ScalarNode:
    return dumper.represent_scalar("!unsafe", str(value), style="'")


_UnsafeDumper.add_representer(_Unsafe, _represent)


def _mark(value: Any) -> Any:
    if isinstance(value, str):
        return _Unsafe(value)
    if isinstance(value, Mapping):
        # keys are names (variables, hosts, groups, probe fields): Ansible never templates them
        return {str(k): _mark(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_mark(v) for v in value]
    return value


def unsafe_yaml(data: Mapping[str, Any]) -> str:
    """`data` as YAML for Ansible (an extra-vars file, an inventory) with every string value
    tagged `!unsafe`; numbers and booleans stay what they are."""
    return yaml.dump(
        _mark(data), Dumper=_UnsafeDumper, sort_keys=False, allow_unicode=True, width=1000
    )
