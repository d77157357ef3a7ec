"""The error every refusal becomes, and the subprocess runner that raises it."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Sequence


class BpfUnavailable(RuntimeError):
    """A BPF program cannot be built, loaded, registered or attached here.

    ``str()`` is one readable paragraph ending with the last lines the tool
    printed (libbpf's and the verifier's messages, the kernel's errno text),
    meant to be shown as the reason a scheme is unavailable; ``detail`` keeps
    everything the tool printed.
    """

    def __init__(self, message: str, detail: str = "") -> None:
        self.detail = detail
        lines = [line.strip() for line in detail.splitlines() if line.strip()]
        tail = " | ".join(lines[-12:])
        super().__init__(f"{message}: {tail}" if tail else message)


def run(argv: Sequence[str], what: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """Run a tool (argument list, no shell) and return the finished process.

    A non-zero exit raises :class:`BpfUnavailable` with ``what`` and the
    tool's output; a missing tool says so.
    """
    try:
        result = subprocess.run(list(argv), capture_output=True, text=True, check=False, timeout=timeout)
    except FileNotFoundError as error:
        raise BpfUnavailable(f"{what}: {argv[0]} is not installed "
                             "(scripts/bootstrap.sh, or scripts/install.sh on a server, installs it)") from error
    except subprocess.TimeoutExpired as error:
        raise BpfUnavailable(f"{what}: {argv[0]} did not finish in {timeout:.0f} s") from error
    if result.returncode != 0:
        raise BpfUnavailable(f"{what} failed ({_ended(result.returncode)})", result.stderr + result.stdout)
    return result


def _ended(returncode: int) -> str:
    """How a tool ended: its exit status, or the signal that killed it (SIGSYS: a seccomp filter, such as a
    unit's SystemCallFilter=, refused a system call)."""
    if returncode > 0:
        return f"exit {returncode}"
    name = signal.Signals(-returncode).name
    if name == "SIGSYS":
        return "killed by SIGSYS: a seccomp filter refused one of its system calls (SystemCallFilter= of a unit?)"
    return f"killed by {name}"
