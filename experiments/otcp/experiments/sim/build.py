"""Compile the scenario program (``src/otcp_sim.cc``) against ns-3 3.44 into ``build/sim/otcp-sim``.

The same source also builds against Debian's ``libns3-dev`` 3.37 (``debian_sdk``), which
benchmarks/sim_builds.py measures against the chosen build.

ns-3 comes from the ``ns3`` wheel, used as a C++ SDK: its ``include/`` and ``lib64/`` (installed by
scripts/bootstrap.sh with ``pip install --no-deps``, so without its Python bindings); JSON from
Debian's ``nlohmann-json3-dev``; the compiler is ``g++`` (C++20, as ns-3 3.44 wants). The program is
rebuilt when a source is newer than it or the SDK moved (the command line is kept beside it); a file
lock serialises builds started at once; the binary is replaced atomically. What is missing is named
in a ``SimulatorUnavailable``.
"""

from __future__ import annotations

import dataclasses
import fcntl
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
SOURCE_DIR = Path(__file__).resolve().parent / "src"
BUILD_DIR = ROOT / "build" / "sim"
PROGRAM = BUILD_DIR / "otcp-sim"
NS3_VERSION = "3.44"
#: The ns-3 modules the scenario links.
MODULES = ("core", "network", "internet", "point-to-point", "traffic-control")
JSON_HEADER = Path("/usr/include/nlohmann/json.hpp")
CXXFLAGS = ["-O2", "-Wall"]
DEBIAN_HEADER = Path("/usr/include/ns3/tcp-socket-base.h")


class SimulatorUnavailable(RuntimeError):
    """The scenario program cannot be built or run here; says what is missing and how to get it."""


def sdk_root() -> Path:
    """The ns3 wheel's directory (include/, lib64/) in this Python's site-packages."""
    spec = importlib.util.find_spec("ns3")
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        root = Path(location)
        if (root / "include" / "ns3" / "tcp-socket-base.h").exists():
            return root
    raise SimulatorUnavailable(
        f"ns-3 {NS3_VERSION} is not installed for {sys.executable}: run scripts/bootstrap.sh, or "
        f"`{sys.executable} -m pip install --no-deps ns3=={NS3_VERSION}.post0`")


@dataclasses.dataclass(frozen=True)
class Sdk:
    """An ns-3 build the program compiles against: its name, the C++ standard its headers want, and
    the compiler's include, library and run-path arguments."""

    name: str
    standard: str
    flags: tuple[str, ...]


def wheel_sdk() -> Sdk:
    """The ns3 wheel 3.44 in this Python's site-packages (the build set-up makes)."""
    root = sdk_root()
    lib = root / "lib64"
    return Sdk(f"ns-3 {NS3_VERSION} (ns3 wheel)", "c++20",
               ("-I", str(root / "include"), "-L", str(lib), *[f"-lns{NS3_VERSION}-{m}" for m in MODULES],
                f"-Wl,-rpath,{lib}"))


def debian_sdk() -> Sdk:
    """Debian's libns3-dev 3.37 (headers in /usr/include/ns3, C++17)."""
    if not DEBIAN_HEADER.exists():
        raise SimulatorUnavailable(f"{DEBIAN_HEADER} is missing (Debian: apt-get install libns3-dev libgsl-dev)")
    return Sdk("ns-3 3.37 (Debian libns3-dev)", "c++17", tuple(f"-lns3-{m}" for m in MODULES))


def command(sdk: Sdk, output: Path) -> list[str]:
    """The g++ command line that builds the program into output against sdk."""
    return ["g++", f"-std={sdk.standard}", *CXXFLAGS, str(SOURCE_DIR / "otcp_sim.cc"), "-o", str(output),
            *sdk.flags]


def compile_into(sdk: Sdk, output: Path) -> None:
    """Build the program against sdk into output (replaced atomically); SimulatorUnavailable carries g++'s
    messages."""
    _check_tools()
    tmp = output.with_name(f"{output.name}.tmp{os.getpid()}")
    done = subprocess.run(command(sdk, tmp), capture_output=True, text=True)
    if done.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise SimulatorUnavailable(f"g++ could not build {SOURCE_DIR / 'otcp_sim.cc'} against {sdk.name}:\n"
                                   f"{done.stderr.strip()}")
    os.replace(tmp, output)


def _check_tools() -> None:
    if shutil.which("g++") is None:
        raise SimulatorUnavailable("g++ is not installed (Debian: apt-get install g++; scripts/bootstrap.sh does)")
    if not JSON_HEADER.exists():
        raise SimulatorUnavailable(f"{JSON_HEADER} is missing (Debian: apt-get install nlohmann-json3-dev; "
                                   "scripts/bootstrap.sh does)")


def _stale(recorded: Path, line: list[str]) -> bool:
    if not PROGRAM.exists() or not recorded.exists() or recorded.read_text() != "\n".join(line) + "\n":
        return True
    built = PROGRAM.stat().st_mtime
    return any(source.stat().st_mtime > built for source in SOURCE_DIR.iterdir())


def build(force: bool = False) -> Path:
    """The scenario program, built first when missing or out of date; SimulatorUnavailable names
    what is missing, or carries g++'s messages."""
    sdk = wheel_sdk()
    _check_tools()
    BUILD_DIR.mkdir(parents=True, exist_ok=True)
    recorded = BUILD_DIR / "otcp-sim.command"
    with open(BUILD_DIR / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        final = command(sdk, PROGRAM)
        if force or _stale(recorded, final):
            compile_into(sdk, PROGRAM)
            recorded.write_text("\n".join(final) + "\n")
    return PROGRAM


def program() -> Path:
    """The built program; SimulatorUnavailable when set-up has not built it (or it is out of date)."""
    return build()
