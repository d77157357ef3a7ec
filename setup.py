"""OTCP: measurement-based TCP parameter tuning for data-center fabrics."""

from setuptools import setup

setup(
    name="otcp",
    version="0.1.0",
    description="Controller, host agent and Mininet experiments that tune TCP "
    "(minRTO, initial and maximum window) per path from fabric measurements",
    python_requires=">=3.11",
    packages=["ryu_app", "agent", "wire", "topo", "experiments", "otcp_bpf"],
    py_modules=["validation"],
    install_requires=[
        "os-ken==3.1.1",
        "networkx>=3.0",
        "numpy>=1.24",
        "pyroute2>=0.7",
        "PyYAML>=6.0",
        "matplotlib>=3.6",
        "pydantic>=2.5,<3",
        "prometheus_client>=0.16",
    ],
    extras_require={"test": ["pytest>=7", "hypothesis>=6", "ruff>=0.6", "mypy>=1.10", "types-PyYAML"]},
    entry_points={
        "console_scripts": [
            "otcp-controller=ryu_app.cli:main",
            "otcp-agent=agent.cli:main",
            "otcp-experiment=experiments.cli:main",
        ],
    },
)
