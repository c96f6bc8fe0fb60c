"""The suite's own assertions can fail: no `assert True`, `assert <constant>`, `... else True`,
or `assert x == x` anywhere under tests/ (an assertion that cannot fail hides a broken method)."""

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def vacuous(test: ast.expr) -> str | None:
    """Why an assert's condition cannot fail, or None."""
    if isinstance(test, ast.Constant):
        return f"asserts the constant {test.value!r}"
    if isinstance(test, ast.IfExp):
        for branch in (test.body, test.orelse):
            if isinstance(branch, ast.Constant) and branch.value:
                return "a conditional whose one branch is a true constant"
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        same = ast.dump(test.left) == ast.dump(test.comparators[0])
        if same and isinstance(test.ops[0], ast.Eq | ast.Is | ast.GtE | ast.LtE):
            return "compares an expression with itself"
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or):
        for v in test.values:
            if isinstance(v, ast.Constant) and v.value:
                return "an `or` with a true constant"
    if isinstance(test, ast.Tuple | ast.List) and test.elts:
        return "a non-empty tuple/list (always true)"
    return None


def scan(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return [
        f"{path.name}:{node.lineno}: {why}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Assert) and (why := vacuous(node.test))
    ]


def test_no_assertion_that_cannot_fail():
    found = [hit for p in sorted(TESTS.glob("*.py")) for hit in scan(p)]
    assert not found, "assertions that cannot fail:\n" + "\n".join(found)


def test_the_scanner_finds_each_kind(tmp_path):
    src = tmp_path / "bad.py"
    src.write_text(
        "def t(x, res):\n"
        "    assert True\n"
        "    assert 1\n"
        "    assert f(x) if hasattr(res, 'm') else True\n"
        "    assert x == x\n"
        "    assert x or True\n"
        "    assert (x, 'message')\n"
        "    assert x == 1\n"  # a real one
    )
    assert [h.split(":")[1] for h in scan(src)] == ["2", "3", "4", "5", "6", "7"]
