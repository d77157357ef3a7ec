"""A congestion control registered by a process that is then killed: what OTCP's clean-up must find
and undo (tests of otcp_dctcp and otcp_scalable, root)."""

import contextlib
import signal
import subprocess
import sys


@contextlib.contextmanager
def registered_then_killed(register, wait_s):
    """Run a process that registers an OTCP congestion control with ``otcp.bpf.<register>`` (waiting
    up to ``wait_s`` for another OTCP process using it) and then sleeps; yield its struct_ops map id
    while it lives, and kill it (SIGKILL: nothing of its own clean-up runs) on leaving."""
    killed = subprocess.Popen(
        [sys.executable, "-c", "import time\nfrom otcp import bpf as otcp_bpf\n"
         f"cc = otcp_bpf.{register}(wait_s={wait_s})\n"
         "print(cc.map_id, flush=True)\n"
         "time.sleep(120)\n"],
        stdout=subprocess.PIPE, text=True)
    try:
        yield int(killed.stdout.readline())
    finally:
        killed.send_signal(signal.SIGKILL)
        killed.wait()
