"""Package layering: every `import jaxtts...` in jaxtts/ (module level or inside a function)
goes to a unit on a line above the importer's in docs/DESIGN.md's layer list."""

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _layers() -> dict[str, int]:
    text = (REPO / "docs" / "DESIGN.md").read_text()
    block = text.split("<!-- layers -->")[1].split("<!-- /layers -->")[0]
    out = {}
    for line in block.strip().splitlines():
        m = re.match(r"(\d+)\. (.*)", line.strip())
        for unit in re.findall(r"`([\w.]+)`", m.group(2)):
            out[unit] = int(m.group(1))
    return out


def _unit(module: str) -> str:
    return ".".join(module.split(".")[:2])


def _imports(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "jaxtts":
                yield from ((f"jaxtts.{a.name}", node.lineno) for a in node.names)
            elif node.module.startswith("jaxtts."):
                yield node.module, node.lineno
        elif isinstance(node, ast.Import):
            yield from ((a.name, node.lineno) for a in node.names if a.name.startswith("jaxtts."))


def test_every_import_goes_down_the_layer_list():
    layers = _layers()
    assert len(layers) == 20 and layers["jaxtts.errors"] == 1
    bad, seen = [], set()
    for path in sorted((REPO / "jaxtts").rglob("*.py")):
        mod = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
        me = _unit(mod)
        if me == "jaxtts":  # the package's own __init__ (a docstring and the version)
            assert not list(_imports(path)), path
            continue
        seen.add(me)
        assert me in layers, f"{path}: unit {me} is not in docs/DESIGN.md's layer list"
        for target, line in _imports(path):
            t = _unit(target)
            if t != me and layers[t] >= layers[me]:
                bad.append(
                    f"{path.relative_to(REPO)}:{line} {me} (layer {layers[me]}) imports "
                    f"{t} (layer {layers[t]})"
                )
    assert not bad, "\n".join(bad)
    assert seen == set(layers), f"listed but absent: {sorted(set(layers) - seen)}"


def test_the_check_catches_an_upward_import_inside_a_function(tmp_path):
    src = "def f():\n    from jaxtts.train import loop\n"
    (tmp_path / "m.py").write_text(src)
    found = list(_imports(tmp_path / "m.py"))
    assert found == [("jaxtts.train", 2)] and _layers()["jaxtts.train"] > _layers()["jaxtts.data"]
