"""Compile ``otcp/bpf/src/*.bpf.c`` against the running kernel's BTF into ``build/bpf/``.

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
BUILD_DIR = ROOT / "build" / "bpf"
KERNEL_BTF = Path("/sys/kernel/btf/vmlinux")
CFLAGS = ["-O2", "-g", "-Wall", "-target", "bpf", "-D__TARGET_ARCH_x86"]


def object_path(name: str) -> Path:
    """Where the object built from ``otcp/bpf/src/NAME.bpf.c`` lands."""
    return BUILD_DIR / f"{name}.bpf.o"


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
    header = BUILD_DIR / "vmlinux.h"
    stamp = BUILD_DIR / "vmlinux.h.sha256"
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
    BUILD_DIR.mkdir(parents=True, exist_ok=True)
    with open(BUILD_DIR / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        header = _vmlinux_header()
        headers = sorted(SOURCE_DIR.glob("*.h")) + [header]
        built = []
        for source in sources():
            target = object_path(source.name.removesuffix(".bpf.c"))
            if force or _stale(target, [source, *headers]):
                tmp = target.with_name(target.name + f".tmp{os.getpid()}")
                run(["clang", *CFLAGS, "-I", str(BUILD_DIR), "-I", str(SOURCE_DIR), "-c", str(source), "-o", str(tmp)],
                    f"compiling {source.name}")
                os.replace(tmp, target)
            built.append(target)
        return built
