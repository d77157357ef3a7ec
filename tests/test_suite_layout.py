"""The test suite's own layout: what tests share lives in tests/support, so no
test module imports another and no helper module sits beside the tests;
tests/support holds no tests. Read from the source with :mod:`ast`."""

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
SUPPORT = TESTS / "support"


def files_outside_support():
    """Every Python file under tests/ outside tests/support."""
    return sorted(path for path in TESTS.rglob("*.py") if SUPPORT not in path.parents)


def imported_modules(path):
    """The top-level names of every module a file imports (absolute imports)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_no_test_module_imports_another():
    test_modules = {path.stem for path in TESTS.rglob("test_*.py")}
    crossing = {str(path.relative_to(TESTS)): sorted(imported_modules(path) & test_modules) for path in files_outside_support()}
    assert {path: names for path, names in crossing.items() if names} == {}


def test_beside_the_tests_there_are_only_conftest_files():
    loose = [str(path.relative_to(TESTS)) for path in files_outside_support()
             if not path.name.startswith("test_") and path.name != "conftest.py"]
    assert loose == [], "shared helpers belong in tests/support"


def test_support_holds_no_tests():
    tests = []
    for path in sorted(SUPPORT.glob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        tests += [f"{path.name}: {node.name}" for node in ast.walk(tree)
                  if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name.lower().startswith("test")]
    assert tests == []
