"""Compile ``otcp/bpf/src/*.bpf.c`` against the running kernel's BTF into a build directory.

The build directory (:func:`build_dir`) is ``$OTCP_BPF_BUILD_DIR`` when set;
else ``build/bpf/`` of the source checkout the package runs from (an
editable install); else, for an installed package, ``/var/lib/otcp-agent/bpf``
(the agent's state directory: writable by the service, while the package's
own directory is read-only under the unit's ``ProtectSystem=strict``).
Nothing is ever written next to the installed package.

``vmlinux.h`` is generated from ``/sys/kernel/btf/vmlinux`` with bpftool at
build time (never committed) and regenerated when the kernel's BTF changes
(its SHA-256 is kept beside it). An object is rebuilt when its source, a
header in ``src/`` or ``vmlinux.h`` is newer. A file lock serialises builds
started at once (set-up and tests); outputs are replaced atomically.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from pathlib import Path

from otcp.bpf.errors import BpfUnavailable, run

ROOT = Path(__file__).resolve().parents[2]
SOURCE_DIR = Path(__file__).resolve().parent / "src"
#: Where an installed package builds (the agent's StateDirectory, see packaging/systemd).
INSTALLED_BUILD_DIR = Path("/var/lib/otcp-agent/bpf")
BUILD_DIR_VARIABLE = "OTCP_BPF_BUILD_DIR"
KERNEL_BTF = Path("/sys/kernel/btf/vmlinux")
CFLAGS = ["-O2", "-g", "-Wall", "-target", "bpf", "-D__TARGET_ARCH_x86"]


def build_dir() -> Path:
    """Where objects and ``vmlinux.h`` are built (see the module)."""
    given = os.environ.get(BUILD_DIR_VARIABLE)
    if given:
        return Path(given)
    if (ROOT / "setup.py").is_file() and (ROOT / "otcp" / "bpf" / "src").is_dir():
        return ROOT / "build" / "bpf"
    return INSTALLED_BUILD_DIR


def object_path(name: str) -> Path:
    """Where the object built from ``otcp/bpf/src/NAME.bpf.c`` lands."""
    return build_dir() / f"{name}.bpf.o"


def sources() -> list[Path]:
    """Every BPF program source of the project."""
    return sorted(SOURCE_DIR.glob("*.bpf.c"))


def _btf_digest() -> str:
    if not KERNEL_BTF.exists():
        raise BpfUnavailable(f"this kernel exposes no BTF ({KERNEL_BTF} is missing; it needs CONFIG_DEBUG_INFO_BTF)")
    return hashlib.sha256(KERNEL_BTF.read_bytes()).hexdigest()


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def _vmlinux_header() -> Path:
    header = build_dir() / "vmlinux.h"
    stamp = build_dir() / "vmlinux.h.sha256"
    digest = _btf_digest()
    if header.exists() and stamp.exists() and stamp.read_text().strip() == digest:
        return header
    text = run(["bpftool", "btf", "dump", "file", str(KERNEL_BTF), "format", "c"], "generating vmlinux.h").stdout
    _write_atomically(header, text)
    _write_atomically(stamp, digest + "\n")
    return header


def _stale(target: Path, inputs: list[Path]) -> bool:
    if not target.exists():
        return True
    built = target.stat().st_mtime
    return any(path.stat().st_mtime > built for path in inputs)


def build(force: bool = False) -> list[Path]:
    """Build every program that is missing or out of date; return all objects.

    Raises :class:`BpfUnavailable` when the kernel has no BTF, a tool is
    missing, or clang refuses a source (with clang's messages).
    """
    where = build_dir()
    try:
        where.mkdir(parents=True, exist_ok=True)
        lock = open(where / ".lock", "w")
    except OSError as error:
        raise BpfUnavailable(f"the BPF build directory {where} is not writable ({error.strerror}); "
                             f"set {BUILD_DIR_VARIABLE} to a writable one") from None
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        header = _vmlinux_header()
        headers = sorted(SOURCE_DIR.glob("*.h")) + [header]
        built = []
        for source in sources():
            target = object_path(source.name.removesuffix(".bpf.c"))
            if force or _stale(target, [source, *headers]):
                tmp = target.with_name(target.name + f".tmp{os.getpid()}")
                run(["clang", *CFLAGS, "-I", str(where), "-I", str(SOURCE_DIR), "-c", str(source), "-o", str(tmp)],
                    f"compiling {source.name}")
                os.replace(tmp, target)
            built.append(target)
        return built
