"""Every repository path the docs name exists: README, docs/, benchmarks/RESULTS.md and the
model cards. The exceptions are declared in one table, RESULTS §former-folders (model folders
shipped once and replaced, or not shipped yet), and each of those must indeed be absent. Paths
that are a command's output (after --out / --out_dir) and templates (`tests/test_<module>.py`,
`natural_*.json`) are not paths of the tree."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOP = (
    "jaxtts/",
    "configs/",
    "benchmarks/",
    "pretrained/",
    "scripts/",
    "tests/",
    "docs/",
    "notebooks/",
)
PATH = re.compile(r"(?<![\w./-])((?:" + "|".join(map(re.escape, TOP)) + r")[\w./-]*[\w/])")
OUTPUT = re.compile(r"--out(?:_dir)?(?:=|\s+)$")  # a command's output (the flag may end a line)


def _docs() -> list[Path]:
    return [
        ROOT / "README.md",
        ROOT / "benchmarks" / "RESULTS.md",
        *sorted((ROOT / "docs").rglob("*.md")),
        *sorted((ROOT / "pretrained").glob("*/MODEL_CARD.md")),
    ]


def named_paths(text: str):
    """(path, line number) of every repository path in a markdown text."""
    for m in PATH.finditer(text):
        after = text[m.end() : m.end() + 1]
        if after in ("*", "<", "{") or OUTPUT.search(text[max(0, m.start() - 20) : m.start()]):
            continue
        yield m.group(1).rstrip("/."), text.count("\n", 0, m.start()) + 1


def former_folders() -> set[str]:
    text = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    section = text.split('<a id="former-folders"></a>', 1)[1].split("<a id=", 1)[0]
    return set(re.findall(r"^\| `([^`]+)` \|", section, re.M))


def test_named_paths_exist():
    former = former_folders()
    assert {"pretrained/dcar", "pretrained/vocoder"} <= former
    missing = []
    for doc in _docs():
        for path, n in named_paths(doc.read_text()):
            if any(path == f or path.startswith(f + "/") for f in former):
                continue
            if not (ROOT / path).exists():
                missing.append(f"{doc.relative_to(ROOT)}:{n}: {path}")
    assert missing == [], "\n".join(missing)


def test_former_folders_are_absent():
    present = [f for f in former_folders() if (ROOT / f).exists()]
    assert present == [], f"listed as former but in the tree: {present}"


def test_the_scanner_finds_paths_and_skips_outputs_and_templates():
    text = (
        "see `jaxtts/codec/model.py` and pretrained/car_deep/MODEL_CARD.md.\n"
        "python x.py --out benchmarks/new_dir\n"
        "`tests/test_<module>.py`, `benchmarks/results/natural_*.json`\n"
    )
    assert list(named_paths(text)) == [
        ("jaxtts/codec/model.py", 1),
        ("pretrained/car_deep/MODEL_CARD.md", 1),
    ]


def _anchors(path: Path) -> set[str]:
    text = path.read_text()
    out = set(re.findall(r'<a id="([^"]+)"></a>', text))
    for h in re.findall(r"^#+ (.*)$", text, re.M):  # GitHub's heading slugs
        out.add(re.sub(r"[^\w\- ]", "", h.lower()).strip().replace(" ", "-"))
    return out


def test_every_anchor_link_resolves():
    """A markdown link `[..](file#anchor)` or `[..](#anchor)` in the docs names a file that
    exists and an anchor (an `<a id>` or a heading) in it: moving a section to
    docs/history/ cannot leave a link behind."""
    docs = [*_docs(), *sorted((ROOT / "docs" / "history").glob("*.md"))]
    bad, cache = [], {}
    for doc in dict.fromkeys(docs):
        for m in re.finditer(r"\]\(([^)\s]*?)#([\w-]+)\)", doc.read_text()):
            target = doc if not m.group(1) else (doc.parent / m.group(1)).resolve()
            if target not in cache:
                cache[target] = _anchors(target) if target.is_file() else None
            if cache[target] is None or m.group(2) not in cache[target]:
                bad.append(f"{doc.relative_to(ROOT)}: {m.group(0)}")
    assert bad == [], "\n".join(bad)
