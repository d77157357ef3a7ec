"""Which OTCP this is: the installed package's version and the agent channel's protocol, as
`--version` prints them and the services' ``otcp_build_info`` metrics label them."""

import importlib.metadata
import platform

from otcp.wire.limits import VERSION


def package_version() -> str:
    """The installed otcp package's version ("unknown" when it runs from a tree not installed)."""
    try:
        return importlib.metadata.version("otcp")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def version_line(program: str) -> str:
    """What `PROGRAM --version` prints: the program, the package version, the protocol, the Python."""
    return f"{program} {package_version()} (agent channel protocol {VERSION}, Python {platform.python_version()})"


def build_labels() -> dict[str, str]:
    """The labels of an ``otcp_build_info`` metric (whose value is 1)."""
    return {"version": package_version(), "protocol": str(VERSION), "python": platform.python_version()}
