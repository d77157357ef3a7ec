"""OTCP: measurement-based TCP parameter tuning for data-center fabrics.

Every role installs under the one namespace package ``otcp``; each top-level
folder of the checkout holds one role's part of it:

- ``otcp/``: what the roles share: ``otcp.wire`` (the controller-agent
  contract and validation), ``otcp.planning`` (the formulas and the planner)
  and ``otcp.bpf`` (building and loading the BPF programs);
- ``ryu_app/``: ``otcp.controller`` (the live controller core) and
  ``otcp.service`` (the os-ken service around it);
- ``agent/``: ``otcp.agent``;
- ``topo/``: ``otcp.topo``;
- ``experiments/``: ``otcp.experiments`` (the Mininet runner; extra ``experiments``).
"""

from setuptools import find_namespace_packages, setup

ROOTS = {".": "otcp.*", "ryu_app": "otcp.*", "agent": "otcp.*", "topo": "otcp.*", "experiments": "otcp.*"}

packages: list[str] = []
package_dir: dict[str, str] = {}
for root, pattern in ROOTS.items():
    for package in find_namespace_packages(where=root, include=[pattern]):
        if not package.replace(".", "/").count("/") or "__pycache__" in package or package.endswith((".src", ".cdfs")):
            continue
        packages.append(package)
        package_dir[package] = package.replace(".", "/") if root == "." else f"{root}/{package.replace('.', '/')}"

setup(
    name="otcp",
    version="0.1.0",
    description="Controller, host agent and Mininet experiments that tune TCP "
    "(minRTO, initial and maximum window) per path from fabric measurements",
    python_requires=">=3.11",
    packages=packages,
    package_dir=package_dir,
    package_data={"otcp.bpf": ["src/*.bpf.c", "src/*.h"], "otcp.experiments.sim": ["src/*.cc", "src/*.h"],
                  "otcp.experiments.traffic": ["cdfs/*.cdf"]},
    install_requires=[
        "os-ken==3.1.1",
        "networkx>=3.0",
        "numpy>=1.24",
        "pyroute2>=0.7",
        "PyYAML>=6.0",
        "pydantic>=2.5,<3",
        "prometheus_client>=0.16",
    ],
    extras_require={
        "experiments": ["matplotlib>=3.6"],
        "test": ["matplotlib>=3.6", "pytest>=7", "hypothesis>=6", "ruff>=0.6", "mypy>=1.10", "types-PyYAML"],
    },
    entry_points={
        "console_scripts": [
            "otcp-controller=otcp.service.cli:main",
            "otcp-agent=otcp.agent.cli:main",
            "otcp-experiment=otcp.experiments.cli:main",
        ],
    },
)
