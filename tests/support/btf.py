"""The BTF a built BPF object carries, read with bpftool: what the tests compare the Python
layouts of its maps' keys and values with."""

import json
import subprocess


def btf_struct(obj, name):
    """The BTF entry of the struct called name in the object file obj (bpftool's JSON)."""
    dumped = json.loads(subprocess.run(["bpftool", "-j", "btf", "dump", "file", str(obj)], capture_output=True,
                                       text=True, check=True).stdout)
    for entry in dumped["types"]:
        if entry.get("kind") == "STRUCT" and entry.get("name") == name:
            return entry
    raise AssertionError(f"{name} not in {obj}")
