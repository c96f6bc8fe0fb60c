"""Reading compiled XLA programs in tests: what runs inside loops."""

from __future__ import annotations

import re


def loop_copies(hlo: str, shape: str) -> dict[str, int]:
    """{computation: number of `copy` ops of a carried buffer (the operand a loop's or a
    branch's parameter) whose result matches the regex `shape` (e.g.
    r"f32\\[2,4,\\d\\d+,16\\]")} over the computations that a while body or a conditional
    branch of the optimized HLO text `hlo` reaches (fusions and wrapped ops included); the
    entry computation and what only it calls are left out. An empty dict: no buffer of that
    shape is copied per loop iteration (copies of activations, e.g. a transpose's layout, are
    not counted)."""
    copy = re.compile(rf"= {shape}\S* copy\(%(get-tuple-element|param)")
    counts: dict[str, int] = {}
    calls: dict[str, set[str]] = {}
    loops: set[str] = set()  # while bodies and conditional branches
    where = None
    for line in hlo.splitlines():
        if line and not line.startswith((" ", "}", "HloModule")):
            where = "ENTRY" if line.startswith("ENTRY") else line.split(" ")[0]
            counts[where], calls[where] = 0, set()
        elif where is not None:
            counts[where] += bool(copy.search(line))
            calls[where] |= set(re.findall(r"(?:calls|to_apply)=(%[\w.\-]+)", line))
            inner = set(re.findall(r"body=(%[\w.\-]+)", line))
            for group in re.findall(r"branch_computations=\{([^}]*)\}", line):
                inner |= {g.strip() for g in group.split(",")}
            calls[where] |= inner
            loops |= inner
    seen, todo = set(), list(loops)
    while todo:
        c = todo.pop()
        if c not in seen and c in calls:
            seen.add(c)
            todo.extend(calls[c])
    return {c: counts[c] for c in seen if counts[c]}


def mentions(hlo: str, shape: str) -> int:
    """How many times a value of the regex `shape` appears in the program (a check that the
    pattern names a real buffer)."""
    return len(re.findall(rf"{shape}\{{", hlo))


def loop_carries(hlo: str, shape: str) -> int:
    """How many buffers of the regex `shape` the program's while loops carry (their state
    tuples): what a loop holds, apart from the temporaries of the code around it."""
    return sum(
        len(re.findall(rf"{shape}\{{", line.split(" while(")[0]))
        for line in hlo.splitlines()
        if " while(" in line
    )
