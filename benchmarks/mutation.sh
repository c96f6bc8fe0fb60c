#!/usr/bin/env bash
# Mutation score of the core maths files: how many small code changes (mutants) the fast tests
# that cover each file catch. A benchmark, not a test (minutes per file on 2 cores).
#
#   bash benchmarks/mutation.sh                    # every file below
#   FILES="grpo sampling" bash benchmarks/mutation.sh
#   SAMPLE=100 FILES=align bash benchmarks/mutation.sh   # 100 mutants drawn at random (seed 0)
#
#   SURVIVORS=1 FILES=dcar_reward bash benchmarks/mutation.sh  # re-run only the mutants that
#                                  # survived the last session (after adding tests; at HEAD)
#
# A target may name line ranges (5th field, e.g. "77-122,200-210"): only mutants that start on
# those lines run (the maths inside a larger file: the DCAR reward in dcpo.py, the TLDR
# compressor and patch grid in model.py; the SSD maths in strategy.py: log_of, residual, verify
# and the step, not the spec parser).
# Tool: cosmic-ray 8.7.0 (from the package index), installed into its own virtual environment
# (.cache/mutation-venv) so it never touches the project's; the tests run with the project's
# python (PY, default python3). Mutants are applied in a git worktree of HEAD
# (.cache/mutation-worktree), never in this checkout. The JAX compilation cache is shared
# across mutants (an unmutated function compiles once). Output: out/mutation/<name>.sqlite
# (cosmic-ray's session) and out/mutation/summary.json + a markdown table on stdout: killed,
# survived, timed out (a timeout counts as killed: the mutant hung or slowed the tests past
# the limit), incompetent (the mutant does not import).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PY:-python3}
PY=$(command -v "$PY")
OUT=out/mutation
VENV=.cache/mutation-venv
WT=.cache/mutation-worktree
mkdir -p "$OUT" .cache

# name | module path | tests (pytest args) | per-mutant timeout s [| line ranges]
TARGETS=(
  "grpo|jaxtts/train/rl/grpo.py|tests/test_rl.py|240"
  "ssd_verify|jaxtts/methods/ssd/strategy.py|tests/test_ssd.py -k by_hand or lossless or greedy or log_of or made_of or own_positions or batch_n or rolls_both|400|66-109,201-271"
  "sampling|jaxtts/decode/sampling.py|tests/test_sampling.py|300"
  "align|jaxtts/train/align.py|tests/test_align.py|300"
  "mdm_orders|jaxtts/methods/mdm/orders.py|tests/test_mdm_parts.py|300"
  "mdm_dmol|jaxtts/methods/mdm/dmol.py|tests/test_mdm_parts.py|300"
  "dcar_reward|jaxtts/methods/dcar/dcpo.py|tests/test_dcar.py -k hand_computed or chase or guidance|300|77-122"
  "tldr_compressor|jaxtts/methods/tldr/model.py|tests/test_tldr.py -k patch_grid or shift or compressor or padding|300|116-186"
)
FILES=${FILES:-grpo ssd_verify sampling align mdm_orders mdm_dmol dcar_reward tldr_compressor}

if [ ! -x "$VENV/bin/cosmic-ray" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q cosmic-ray==8.7.0
fi
if [ ! -d "$WT" ]; then
  git worktree add --detach "$WT" HEAD > /dev/null
else
  git -C "$WT" checkout -q --detach "$(git rev-parse HEAD)"
  git -C "$WT" reset -q --hard
fi
export JAX_COMPILATION_CACHE_DIR="$ROOT/.cache/jax_mutation"
export JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0.3

for t in "${TARGETS[@]}"; do
  IFS='|' read -r name module tests limit lines <<< "$t"
  [[ " $FILES " == *" $name "* ]] || continue
  # -k takes the rest of the test spec as one expression
  files=${tests%% -k *}
  kexpr=""
  [[ "$tests" == *" -k "* ]] && kexpr=${tests#* -k }
  cfg="$OUT/$name.toml"
  cat > "$cfg" << EOF
[cosmic-ray]
module-path = "$module"
timeout = $limit
excluded-modules = []
test-command = "$PY -m pytest -x -q -p no:cacheprovider $files${kexpr:+ -k '$kexpr'}"

[cosmic-ray.distributor]
name = "local"
EOF
  db="$ROOT/$OUT/$name.sqlite"
  echo "=== $name: $module ($(date -u +%T))"
  (
    cd "$WT"
    if [ ! -f "$db" ]; then
      "$ROOT/$VENV/bin/cosmic-ray" init "$ROOT/$cfg" "$db"
      n=$("$ROOT/$VENV/bin/python" -c "import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute('select count(*) from work_items').fetchone()[0])" "$db")
      if [ "$n" = "0" ]; then  # (seen when this script was edited while it ran): not "run"
        echo "$name: cosmic-ray init found no mutants in $module; run it again" >&2
        rm -f "$db"
        exit 0  # leaves this target's subshell; the loop goes on
      fi
      # line ranges: drop the mutants outside them
      if [ -n "${lines:-}" ]; then
        "$ROOT/$VENV/bin/python" - "$db" "$lines" << 'PY'
import sqlite3, sys
con = sqlite3.connect(sys.argv[1])
spans = [tuple(int(x) for x in r.split("-")) for r in sys.argv[2].split(",")]
rows = con.execute("select job_id, start_pos_row from mutation_specs").fetchall()
drop = [(j,) for j, row in rows if not any(a <= row <= b for a, b in spans)]
con.executemany("delete from mutation_specs where job_id = ?", drop)
con.executemany("delete from work_items where job_id = ?", drop)
con.commit()
print(f"{len(rows) - len(drop)} of {len(rows)} mutants on lines {sys.argv[2]}")
PY
      fi
      # SAMPLE=N: run N mutants drawn at random (seed 0) instead of all of them
      if [ -n "${SAMPLE:-}" ]; then
        "$ROOT/$VENV/bin/python" - "$db" "$SAMPLE" << 'PY'
import random, sqlite3, sys
con = sqlite3.connect(sys.argv[1])
jobs = sorted(j for (j,) in con.execute("select job_id from work_items"))
keep = set(random.Random(0).sample(jobs, min(int(sys.argv[2]), len(jobs))))
drop = [(j,) for j in jobs if j not in keep]
con.executemany("delete from mutation_specs where job_id = ?", drop)
con.executemany("delete from work_items where job_id = ?", drop)
con.commit()
PY
      fi
    fi
    if [ -n "${SURVIVORS:-}" ] && [ -f "$db" ]; then
      cp "$db" "${db%.sqlite}_before.sqlite"  # the table before the new tests
      "$ROOT/$VENV/bin/python" - "$db" << 'PY'
import sqlite3, sys
con = sqlite3.connect(sys.argv[1])
n = con.execute("delete from work_results where test_outcome = 'SURVIVED'").rowcount
con.commit()
print(f"{n} survivors to run again")
PY
    fi
    "$ROOT/$VENV/bin/cosmic-ray" exec "$ROOT/$cfg" "$db"  # resumes an interrupted session
  )
done

"$VENV/bin/python" - "$OUT" $FILES << 'PY'
import json, sqlite3, sys
from pathlib import Path

out, names = Path(sys.argv[1]), sys.argv[2:]
summary = {}
for name in names:
    db = out / f"{name}.sqlite"
    if not db.is_file():
        continue
    con = sqlite3.connect(db)
    rows = con.execute("select test_outcome, worker_outcome, output from work_results").fetchall()
    total = con.execute("select count(*) from work_items").fetchone()[0]
    c = {"killed": 0, "survived": 0, "timeout": 0, "incompetent": 0}
    for test_outcome, worker_outcome, output in rows:
        t = str(test_outcome).lower()
        if "killed" in t and (output or "").strip() == "timeout":  # cosmic-ray: KILLED, "timeout"
            c["timeout"] += 1
        elif "incompetent" in t:
            c["incompetent"] += 1
        elif "killed" in t:
            c["killed"] += 1
        elif "survived" in t:
            c["survived"] += 1
    done = sum(c.values())
    competent = done - c["incompetent"]
    score = (c["killed"] + c["timeout"]) / competent if competent else None
    summary[name] = dict(c, mutants=total, done=done, score=score)
(out / "summary.json").write_text(json.dumps(summary, indent=1))
print("\n| file | mutants | run | killed | timed out | survived | incompetent | score |")
print("|---|--:|--:|--:|--:|--:|--:|--:|")
for name, c in summary.items():
    sc = f"{100 * c['score']:.0f} %" if c["score"] is not None else "—"
    print(f"| {name} | {c['mutants']} | {c['done']} | {c['killed']} | {c['timeout']} | "
          f"{c['survived']} | {c['incompetent']} | {sc} |")
PY
