"""The Kit debug extension, checked without Kit: its manifest, its module and its IExt class, read from the source;
and the rule that keeps Kit out of the package: `omni`/`isaacsim` (and Kit's `usdrt`, `carb`) are imported only
inside functions of the RTX backend, never by `import r2s2r`."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXT = ROOT / "exts" / "r2s2r.debug"
PACKAGE = ROOT / "source" / "r2s2r" / "r2s2r"
KIT = ("omni", "isaacsim", "usdrt", "carb")
RTX_BACKEND = PACKAGE / "render" / "isaac_rtx.py"


@pytest.fixture(scope="module")
def manifest() -> dict:
    return tomllib.loads((EXT / "config" / "extension.toml").read_text())


def module_source(manifest: dict) -> list[Path]:
    """The files of every python module the manifest names (a package folder or a single file)."""
    out = []
    for entry in manifest["python"]["module"]:
        base = EXT.joinpath(*entry["name"].split("."))
        out += sorted(base.rglob("*.py")) if base.is_dir() else [base.with_suffix(".py")]
    return out


def kit_imports(tree: ast.AST) -> list[tuple[int, str, bool]]:
    """(line, module, inside a function) for every import of a Kit module in a parsed file."""
    found = []

    def visit(node: ast.AST, in_function: bool) -> None:
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module]
        found.extend((node.lineno, n, in_function) for n in names if n.split(".")[0] in KIT)
        inner = in_function or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    visit(tree, False)
    return found


def test_manifest_names_an_existing_python_module(manifest):
    names = [m["name"] for m in manifest["python"]["module"]]
    assert names == ["r2s2r_debug"]
    assert (EXT / "r2s2r_debug" / "__init__.py").is_file()
    assert manifest["package"]["version"] and manifest["package"]["title"]
    assert {"omni.ui", "omni.usd"} <= set(manifest["dependencies"])
    assert (EXT / manifest["package"]["readme"]).is_file()


def test_the_module_defines_an_iext_subclass_with_its_hooks(manifest):
    found = {}
    for path in module_source(manifest):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef) and any(ast.unparse(b) == "omni.ext.IExt" for b in node.bases):
                found[node.name] = {f.name for f in node.body if isinstance(f, ast.FunctionDef)}
    assert found, "no omni.ext.IExt subclass in the extension's module"
    assert all({"on_startup", "on_shutdown"} <= hooks for hooks in found.values())
    # Kit loads the classes the module's top level exposes.
    init = ast.parse((EXT / "r2s2r_debug" / "__init__.py").read_text())
    exposed = {a.asname or a.name for n in ast.walk(init) if isinstance(n, ast.ImportFrom) for a in n.names}
    assert set(found) <= exposed


def test_kit_is_imported_only_lazily_by_the_rtx_backend():
    offenders, lazy_in_backend = [], 0
    for path in sorted(PACKAGE.rglob("*.py")):
        for line, name, in_function in kit_imports(ast.parse(path.read_text(), str(path))):
            if path == RTX_BACKEND and in_function:
                lazy_in_backend += 1
            else:
                offenders.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    assert not offenders, "Kit modules outside the RTX backend's functions:\n" + "\n".join(offenders)
    assert lazy_in_backend > 0  # the scan does see the backend's lazy imports


def test_the_scan_tells_module_level_from_lazy_imports():
    tree = ast.parse("import omni.usd\nfrom isaacsim import SimulationApp\nimport numpy\n"
                     "def f():\n    import omni.replicator.core as rep\n")
    assert kit_imports(tree) == [(1, "omni.usd", False), (2, "isaacsim", False), (5, "omni.replicator.core", True)]
