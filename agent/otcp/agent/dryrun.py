"""``otcp-agent apply --dry-run``: what applying a set would change, route by route, changing nothing.

It goes the way `otcp.agent.core.Agent.apply` goes (`validate_param_set`, `check_generation`
against the stored generation, `RouteTable.plan`, and the one-shot command's
`Enforcement.note_unenforced`) and stops before the first write: no route, no BPF entry and no
state is written. The state file is only read, and not created when it is missing.
"""

import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Literal

from otcp.agent.enforcement import Enforcement
from otcp.agent.routes import Plan, Route, RouteTable, table_name
from otcp.agent.state import Applied, CorruptState, State
from otcp.wire.paramset import ParamSet, check_generation, validate_param_set

Op = Literal["add", "change", "remove", "keep", "skip"]
Value = int | str | bool | None
Describe = Callable[[Route], dict[str, Any]]
#: The route attributes compared, as `RouteTable.describe` names them.
ATTRIBUTES = ("dev", "gateway", "rto_min_ms", "initcwnd", "cwnd_clamp", "advmss", "quickack")
#: The planner's word for a write -> the dry run's.
_OPS: dict[str, Op] = {"add": "add", "replace": "change", "keep": "keep"}


@dataclass(frozen=True)
class AttributeChange:
    """One attribute of a route before and after (None: the route has none, or is not there)."""

    name: str
    old: Value
    new: Value


@dataclass(frozen=True)
class RouteChange:
    """What apply would do to one destination's route, with every attribute's old and new value."""

    op: Op
    dst: str
    table: int | None
    attributes: tuple[AttributeChange, ...] = ()
    reason: str = ""

    def changed(self) -> list[AttributeChange]:
        """The attributes whose value would change."""
        return [attribute for attribute in self.attributes if attribute.old != attribute.new]


@dataclass(frozen=True)
class DryRun:
    """What applying a set would do: its generation, the stored one, and the change per route."""

    generation: int
    applied_generation: int | None
    changes: tuple[RouteChange, ...]
    state_note: str = ""  # what apply would do about an unusable state file

    def counts(self) -> dict[Op, int]:
        """How many routes each operation would touch."""
        ops: tuple[Op, ...] = ("add", "change", "remove", "keep", "skip")
        return {op: sum(1 for change in self.changes if change.op == op) for op in ops}

    def as_json(self) -> dict[str, Any]:
        """The dry run as ``apply --dry-run --json`` prints it."""
        return {"dry_run": True, **asdict(self), "counts": self.counts()}


def dry_run(document: ParamSet | dict[str, Any], state_path: str, netns: str | None = None) -> DryRun:
    """Validate a set as apply does and plan it against the kernel's routes now; write nothing.

    Raises ValidationError as apply would (a bad set, or a generation that is not newer than the
    stored one)."""
    applied, state_note = stored_applied(state_path)
    validated = validate_param_set(document)
    check_generation(validated, *((applied.generation, applied.param_set) if applied else (None,)))
    with RouteTable(netns) as table:
        plan = table.plan(validated.routes)
        names = table.interface_names()
        changes = route_changes(plan, validated, names, lambda route: table.describe(route, names),
                                Enforcement.one_shot(netns))
    return DryRun(validated.generation, None if applied is None else applied.generation, tuple(changes), state_note)


def stored_applied(state_path: str) -> tuple[Applied | None, str]:
    """The stored generation, read without writing (None when there is no state file); with an
    unusable file, None and what apply would do about it."""
    if not os.path.exists(state_path):
        return None, ""
    try:
        state = State(state_path)
    except CorruptState as error:
        return None, f"{error}; apply would move it aside and start with an empty state"
    try:
        return state.applied(), ""
    finally:
        state.close()


def route_changes(plan: Plan, validated: ParamSet, names: dict[int, str], describe: Describe,
                  enforcement: Enforcement) -> list[RouteChange]:
    """The plan as one change per destination: the set's routes in order (add, change, keep or
    skip), then the OTCP routes apply would remove. ``names``: the interfaces by index;
    ``describe``: a route's attributes (`RouteTable.describe`)."""
    results = enforcement.note_unenforced(validated.routes, plan.results(names))
    writes = iter(plan.writes)
    changes = []
    for result in results:
        if result.status == "skipped":
            changes.append(RouteChange("skip", result.dst, None, reason=result.reason or ""))
            continue
        op, new, old = next(writes)
        changes.append(RouteChange(_OPS[op], new.dst, new.table, _attributes(old, new, describe),
                                   result.reason or ""))
    changes += [RouteChange("remove", old.dst, old.table, _attributes(old, None, describe)) for old in plan.stale]
    return changes


def _attributes(old: Route | None, new: Route | None, describe: Describe) -> tuple[AttributeChange, ...]:
    before = describe(old) if old is not None else {}
    after = describe(new) if new is not None else {}
    return tuple(AttributeChange(name, before.get(name), after.get(name)) for name in ATTRIBUTES)


def format_dry_run(result: DryRun) -> list[str]:
    """The dry run as text: a summary line, then one line per route with the values that change."""
    counts = result.counts()
    stored = "none" if result.applied_generation is None else str(result.applied_generation)
    lines = [f"dry run: generation {result.generation} (applied now: {stored}): "
             + ", ".join(f"{counts[op]} {op}" for op in counts) + "; nothing was changed"]
    if result.state_note:
        lines.append(f"  state: {result.state_note}")
    for change in result.changes:
        place = f"{change.dst} ({table_name(change.table)})" if change.table is not None else change.dst
        lines.append(f"  {change.op:<6}  {place}{_described(change)}")
    return lines


def _described(change: RouteChange) -> str:
    """What a line says after the destination: the values that change, or the reason."""
    if change.op == "skip":
        return f": {change.reason}"
    if change.op in ("add", "keep"):
        parts = [f"{a.name} {_value(a.new)}" for a in change.attributes if a.new is not None]
    elif change.op == "remove":
        parts = [f"{a.name} {_value(a.old)}" for a in change.attributes if a.old is not None]
    else:
        parts = [f"{a.name} {_value(a.old)} -> {_value(a.new)}" for a in change.changed()]
    text = f": {', '.join(parts)}" if parts else ""
    return text + (f" ({change.reason})" if change.reason else "")


def _value(value: Value) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)
