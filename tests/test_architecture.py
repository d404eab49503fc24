"""The wings of statemachine/ and which may import which, read from the code (ARCHITECTURE.md).

Every import a module makes when it runs (at its top or inside a function; not the ones
under ``if TYPE_CHECKING:``) is an arrow. Each module belongs to one wing; an arrow may
go only to the module's own wing or to a wing below it, never up and never sideways
between persist and models; and the arrows make no circle.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "statemachine"

# Wing by module (the first prefix that matches), and each wing's floor: a module may
# import a module of a wing on its own floor or below, and persist and models (both on
# floor 1) not each other.
WINGS: tuple[tuple[str, str], ...] = (
    ("statemachine.__main__", "cli"),
    ("statemachine.cli", "cli"),
    ("statemachine.inbox", "inbox"),
    ("statemachine.mcp", "mcp"),
    ("statemachine.models", "models"),
    ("statemachine.persist", "persist"),
    ("statemachine._lease", "run"),
    ("statemachine._runner", "run"),
    ("statemachine._saving", "run"),
    ("statemachine._watch", "run"),
    ("statemachine._worker", "run"),
    ("statemachine._diagram", "face"),
    ("statemachine.lint", "face"),
    ("statemachine.testing", "face"),
    ("statemachine", "core"),  # everything else: the phases and what they are made of
)
FLOORS = {
    "core": 0,
    "persist": 1,
    "models": 1,
    "mcp": 1,
    "run": 2,
    "face": 3,
    "cli": 4,
    "inbox": 4,
}
# The package itself (statemachine/__init__.py) is the public face: it re-exports all.
FACE = "statemachine"


def modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


MODULES = modules()


def wing(module: str) -> str:
    if module == FACE:
        return "face"
    return next(w for prefix, w in WINGS if module == prefix or module.startswith(prefix + "."))


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        package = module.split(".")
        if MODULES[module].name != "__init__.py":
            package = package[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join([*package, *([node.module] if node.module else [])])
    else:
        base = node.module or ""
    return [
        f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base
        for alias in node.names
    ]


def arrows() -> dict[str, set[str]]:
    """Each module's runtime imports of other modules of the package."""
    found: dict[str, set[str]] = {name: set() for name in MODULES}
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text())
        typing_only = {
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for inner in ast.walk(node)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in typing_only:
                found[name].update(
                    target
                    for target in _targets(name, node)
                    if target in MODULES and target != name
                )
    return found


ARROWS = arrows()


def test_every_module_has_a_wing() -> None:
    """The map covers the package (a new module lands in a wing by its name)."""
    assert {wing(module) for module in MODULES} <= set(FLOORS)
    assert wing("statemachine._phases") == "core"
    assert wing("statemachine.models._openai") == "models"


def test_no_arrow_runs_up_or_sideways() -> None:
    """The core imports nothing above it; persist and models do not import each other."""
    wrong = []
    for source, targets in ARROWS.items():
        for target in targets:
            here, there = wing(source), wing(target)
            up = FLOORS[there] > FLOORS[here]
            sideways = {here, there} == {"persist", "models"}
            if up or sideways:
                wrong.append(f"{source} ({here}) -> {target} ({there})")
    assert wrong == []


def test_the_core_imports_no_storage_diagram_or_command_line() -> None:
    """Named once more, as DESIGN says it: the phases know nothing of what sits above."""
    core = [module for module in MODULES if wing(module) == "core"]
    above = {module for module in MODULES if wing(module) != "core"}
    assert {(m, t) for m in core for t in ARROWS[m] if t in above} == set()


def test_the_imports_make_no_circle() -> None:
    """No module reaches itself through the arrows (Tarjan's strongly connected parts)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in ARROWS[module]:
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            part = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                part.append(top)
                if top == module:
                    break
            if len(part) > 1:
                circles.append(sorted(part))

    for module in sorted(MODULES):
        if module not in index:
            visit(module)
    assert circles == []


def test_architecture_md_draws_these_wings() -> None:
    """ARCHITECTURE.md names every wing and its floor, so the drawing and the test agree."""
    text = (PACKAGE.parent / "ARCHITECTURE.md").read_text()
    for name, floor in FLOORS.items():
        assert f"`{name}` (floor {floor})" in text, name
