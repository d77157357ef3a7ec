"""What a configuration reload changes: which keys apply to the running controller and which wait
for a restart (docs/controller.md, "Reload").

A reload reads the configuration file and its inventory again and checks them completely, as
`otcp-controller run` does; a file that fails is refused with the same one-line error and the
running configuration stays. Of a file that passes, the keys that only steer planning and the
loops' pace apply at once: the inventory (its path or its content), `intervals`, `defaults`,
`bounds`, `parameters`, `forwarding`, `retention` and `log_level`. The others name sockets, files or state the
process opened at start (`openflow`, `agents`, `database`, `admin`, `metrics`), shape estimators
that hold measurements (`delay_window`, `stability`, `measurement`) or place the instance among its
peers (`cluster`): they are reported as needing a restart and keep their running values.
"""

from dataclasses import dataclass
from typing import Any

from otcp.controller import config as controller_config
from otcp.controller.config import ControllerConfig
from otcp.planning import inventory as inventory_module
from otcp.planning.inventory import Inventory

#: The top-level keys a reload applies to the running controller.
LIVE_KEYS = frozenset({"inventory", "intervals", "defaults", "bounds", "parameters", "forwarding", "long_paths",
                       "retention", "log_level"})


@dataclass(frozen=True)
class Changes:
    """The dotted keys a new configuration changes: those applied now, and those needing a restart."""

    live: tuple[str, ...] = ()
    restart: tuple[str, ...] = ()


@dataclass(frozen=True)
class Candidate:
    """A configuration file and its inventory as read again, checked."""

    config: ControllerConfig
    inventory: Inventory | None


def read(path: str) -> Candidate:
    """Read and check the configuration at path and the inventory it names; raises ValueError
    (ConfigError, InventoryError) with the one-line message `otcp-controller run` would give."""
    config = controller_config.load(path)
    return Candidate(config, inventory_module.load(config.inventory) if config.inventory else None)


def changed_keys(old: Any, new: Any, prefix: str = "") -> list[str]:
    """The dotted keys whose values differ between two dumped configurations (dicts of plain values)."""
    if isinstance(old, dict) and isinstance(new, dict):
        keys: list[str] = []
        for key in sorted(set(old) | set(new)):
            keys += changed_keys(old.get(key), new.get(key), f"{prefix}{key}.")
        return keys
    return [] if old == new else [prefix.rstrip(".")]


def changes(running: ControllerConfig, running_inventory: Inventory | None, candidate: Candidate) -> Changes:
    """What candidate changes against the running configuration and inventory."""
    keys = changed_keys(running.model_dump(), candidate.config.model_dump())
    if "inventory" not in keys and running_inventory != candidate.inventory:
        keys.append("inventory")  # the same file, another content
    live = tuple(sorted(key for key in keys if key.split(".")[0] in LIVE_KEYS))
    restart = tuple(sorted(key for key in keys if key.split(".")[0] not in LIVE_KEYS))
    return Changes(live, restart)


def effective(running: ControllerConfig, candidate: ControllerConfig) -> ControllerConfig:
    """The configuration the controller runs with after a reload: candidate's live keys, the
    running values of the keys that need a restart."""
    return running.model_copy(update={key: getattr(candidate, key) for key in LIVE_KEYS})
