"""The packages' dependency arrows point one way, as docs/design.md draws them.

Read from the source with :mod:`ast`, so a new import that crosses a layer
fails here before it becomes a cycle: planning and the wire contract stay
pure (no os-ken, no sockets, no processes), the live controller core uses
os-ken only to parse packets, and nothing below the experiment runner imports
the runner.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parent.parent
#: Where each package of the ``otcp`` namespace lives in the repository.
PACKAGES = {
    "otcp.wire": REPOSITORY / "otcp" / "wire",
    "otcp.planning": REPOSITORY / "otcp" / "planning",
    "otcp.bpf": REPOSITORY / "otcp" / "bpf",
    "otcp.controller": REPOSITORY / "ryu_app" / "otcp" / "controller",
    "otcp.service": REPOSITORY / "ryu_app" / "otcp" / "service",
    "otcp.agent": REPOSITORY / "agent" / "otcp" / "agent",
    "otcp.topo": REPOSITORY / "topo" / "otcp" / "topo",
    "otcp.experiments": REPOSITORY / "experiments" / "otcp" / "experiments",
}
#: The OTCP packages each package may import: the arrows of the package diagram.
MAY_IMPORT = {
    "otcp.wire": set(),
    "otcp.planning": {"otcp.wire"},
    "otcp.bpf": {"otcp.wire"},
    "otcp.controller": {"otcp.planning", "otcp.wire"},
    "otcp.service": {"otcp.controller", "otcp.planning", "otcp.wire"},
    "otcp.agent": {"otcp.bpf", "otcp.wire"},
    "otcp.topo": {"otcp.wire"},
    "otcp.experiments": set(PACKAGES) - {"otcp.experiments"},
}
#: Modules a pure layer must not import: os-ken, green threads, Mininet, sockets, processes, netlink.
IMPURE = {"os_ken", "eventlet", "mininet", "socket", "subprocess", "threading", "pyroute2"}
#: What the live controller core may take from os-ken: packet parsing, not its event machinery.
CORE_OS_KEN = ("os_ken.lib.packet",)


def imported_modules(package: str) -> dict[str, set[str]]:
    """Every absolute import of each module file of a package: {file: module names}."""
    found = {}
    for path in sorted(PACKAGES[package].rglob("*.py")):
        names = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module)
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
        found[str(path.relative_to(REPOSITORY) if path.is_relative_to(REPOSITORY) else path)] = names
    return found


def otcp_package(module: str) -> str | None:
    """The OTCP package a module name belongs to (``otcp.planning.formulas`` -> ``otcp.planning``), else None."""
    parts = module.split(".")
    if parts[0] != "otcp" or len(parts) < 2:
        return None
    candidate = ".".join(parts[:2])
    return candidate if candidate in PACKAGES else None


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_a_package_imports_only_the_packages_below_it(package):
    crossing = {}
    for path, names in imported_modules(package).items():
        bad = {name for name in names
               if (other := otcp_package(name)) and other != package and other not in MAY_IMPORT[package]}
        if bad:
            crossing[path] = sorted(bad)
    assert not crossing, f"{package} may import only {sorted(MAY_IMPORT[package])}; found {crossing}"


@pytest.mark.parametrize("package", ["otcp.wire", "otcp.planning"])
def test_planning_and_the_contract_are_pure(package):
    impure = {path: sorted(name for name in names if name.split(".")[0] in IMPURE)
              for path, names in imported_modules(package).items()}
    assert not {path: names for path, names in impure.items() if names}


def test_the_controller_core_takes_from_os_ken_only_its_packet_parsers():
    found = {}
    for path, names in imported_modules("otcp.controller").items():
        other = sorted(name for name in names if name.split(".")[0] in IMPURE and not name.startswith(CORE_OS_KEN))
        if other:
            found[path] = other
    assert not found


def test_every_package_of_the_namespace_is_named_here():
    on_disk = {f"otcp.{path.name}" for root in {p.parent for p in PACKAGES.values()}
               for path in root.iterdir() if path.is_dir() and (path / "__init__.py").exists()}
    assert on_disk == set(PACKAGES)


def test_a_crossing_import_is_caught(tmp_path, monkeypatch):
    module = tmp_path / "crossing.py"
    module.write_text("from otcp.controller.core import ControllerCore\nimport socket\n")
    monkeypatch.setitem(PACKAGES, "otcp.planning", tmp_path)
    with pytest.raises(AssertionError, match="otcp.controller.core"):
        test_a_package_imports_only_the_packages_below_it("otcp.planning")
    with pytest.raises(AssertionError, match="socket"):
        test_planning_and_the_contract_are_pure("otcp.planning")
