#!/usr/bin/env bash
# What runs on the H200 (the `device` tool), in stages that each fit one call:
#   bash benchmarks/h200.sh tests [IDS]  GPU tests (the given ones, or everything that launches a kernel; 15 workers: the
#       grid took 470 s; outcomes.txt and fails.txt name each result as it comes, SOL_TEST_LOG)
#   bash benchmarks/h200.sh suites A..  benchmark suites into book/data
#   bash benchmarks/h200.sh notebooks [NB ...]   execute chapters in place (all by default), then nbval them
#   bash benchmarks/h200.sh sanitize    compute-sanitizer memcheck, racecheck and synccheck over every kernel
#   bash benchmarks/h200.sh mamba2 [ARGS]  the Mamba-2 SSD suite (benchmarks/mamba2.py; e.g. --quick, --shapes 0,1);
#       it writes after every row. TileGym tunes 2-4 minutes a chunk: (1, 65536, 64) tuned at every chunk
#       ran past 560 s (45a2884), so split such a run with --chunks and --append, and compile TileGym's
#       configurations first in parallel, in the same call: python3 -m benchmarks.tilegym_precompile SHAPE CHUNK
#       (115 configurations in 96 s; the suite's tuning then took 47 s at chunk 256, 64a13fe)
#   bash benchmarks/h200.sh run SCRIPT [ARGS]   any Python script by path (an experiment of a working tree),
#       with M2OUT set to the stage's folder, so that what it writes there comes back packed with its log
# Each device call starts from this checkout's tracked files: what a suite wrote into book/data in
# one call is gone in the next. Copy its CSV and JSON back here (and commit them) before an
# --append run in a later call, or the later call appends to the old file (2026-11-30, mamba2).
# Logs and results are packed into $OUT/<stage>.tgz (one file: the device tool returns at most
# 8 files from $OUT; never copy results there one by one). Each chapter takes 20-25 s to
# execute on the H200 (measured 2026-11-29), nbval as long again (5 files in parallel).
# The device copy's git metadata can name an older commit than the tree it carries (seen
# 2026-12-02: every result file named the session's base): give the local HEAD in the command,
# GIT_COMMIT=$(git rev-parse --short HEAD) evaluated here, so that the results' JSON name it.
set -uo pipefail
stage=$1; shift
[ -n "${GIT_COMMIT:-}" ] || echo "h200.sh: GIT_COMMIT unset: the results' JSON take the device copy's git HEAD, which may be older" >&2
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
log=/tmp/h200-$stage; mkdir -p "$log"
case $stage in
  tests)
    # the given tests (files or ids), or every test that launches a kernel
    [ $# -gt 0 ] || set -- tests --ignore=tests/test_book.py --ignore=tests/test_inspect.py --ignore=tests/test_config.py \
      --ignore=tests/test_validation.py
    SOL_TEST_LOG="$log" timeout "${TEST_TIMEOUT:-540}" python3 -m pytest -q -p no:cacheprovider -n "${TEST_WORKERS:-15}" "$@" 2>&1 \
      | tee "$log/tests.log" | tail -15
    # started and never finished: hung, or still running when the time limit came (unfinished.txt)
    python3 - "$log" <<'PY'
import pathlib, sys
log = pathlib.Path(sys.argv[1])
done = {line.split(" ", 3)[3] for line in (log / "outcomes.txt").read_text().splitlines()} if (log / "outcomes.txt").exists() else set()
started = (log / "started.txt").read_text().splitlines() if (log / "started.txt").exists() else []
left = [t for t in dict.fromkeys(started) if t not in done]
(log / "unfinished.txt").write_text("".join(t + "\n" for t in left))
print(f"started and never finished: {len(left)}", *left[:10], sep="\n  ")
PY
    ;;
  suites)
    timeout "${SUITE_TIMEOUT:-560}" python3 -m benchmarks.run "$@" 2>&1 | tee "$log/suites.log" \
      | grep -E "ceilings|wrote|Error" ;
    cp book/data/*.csv book/data/*.json "$log/" ;;
  sanitize)  # compute-sanitizer over every kernel (benchmarks/sanitize.py): each tool over each (N, dtype)
    # slice in its own process, all side by side (the host-side instrumentation is the slow part), one log each.
    # SANITIZE_TOOLS and SANITIZE_NS pick a part; SANITIZE_BY_OFFSET=1 splits each slice by view offset too
    # (racecheck at N = 262144 ran past 370 s a slice of three offsets, 2026-12-03)
    offsets=0; [ -n "${SANITIZE_BY_OFFSET:-}" ] && offsets=$(python3 -c "from benchmarks.sanitize import OFFSETS; print(*OFFSETS)")
    for tool in ${SANITIZE_TOOLS:-memcheck racecheck synccheck}; do
      for n in ${SANITIZE_NS:-$(python3 -c "from benchmarks.sanitize import NS; print(*NS)")}; do for dt in bf16 fp32; do
        for off in $offsets; do
          if [ -n "${SANITIZE_BY_OFFSET:-}" ]; then part=(--offset $off); name=${tool}_${n}_${dt}_offset$off; else part=(); name=${tool}_${n}_$dt; fi
          [ $tool = synccheck ] && part+=(--max-clusters 4)  # (its limitation: benchmarks/sanitize.py)
          timeout "${SANITIZE_TIMEOUT:-400}" compute-sanitizer --tool $tool --report-api-errors no \
            python3 -m benchmarks.sanitize --n $n --dtype $dt "${part[@]}" > "$log/sanitize_$name.log" 2>&1 &
        done
      done; done
      if [ $tool = synccheck ]; then  # the probe of its limitation (benchmarks.sanitize.PROBES)
        while read -r p; do  # (the loop in this shell, not a pipe's: the wait below waits for its runs)
          timeout "${SANITIZE_TIMEOUT:-400}" compute-sanitizer --tool synccheck --report-api-errors no \
            python3 -m benchmarks.sanitize --probe $p > "$log/sanitize_synccheck_probe_${p// /_}.log" 2>&1 &
        done < <(python3 -c "from benchmarks.sanitize import PROBES; print('\n'.join(' '.join(map(str, p)) for p in PROBES))")
      fi
    done
    wait
    for f in "$log"/sanitize_*.log; do
      echo "$(basename "$f" .log): $(grep -c '^ran every' "$f") ran, $(grep -E '^probe:' "$f")$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$f" | tail -1)"
    done
    cat "$log"/sanitize_*.log > "$log/sanitize.log" ;;
  mamba2)
    timeout "${MAMBA2_TIMEOUT:-560}" python3 -m benchmarks.mamba2 "$@" 2>&1 | tee "$log/mamba2.log" \
      | grep -E -i "ceiling|cuda.tile|error|^  |wrote" | cut -c1-300 ;
    cp book/data/mamba2.csv book/data/mamba2.json "$log/" ;;
  run)  # a script given by path, its results (M2OUT) and log packed with the rest
    script=$1; shift
    M2OUT=$log timeout "${RUN_TIMEOUT:-560}" python3 "$script" "$@" 2>&1 | tee -a "$log/run.log" | tail -40 ;;
  notebooks)
    nbs=("$@"); [ ${#nbs[@]} -gt 0 ] || nbs=(book/[0-9]*.ipynb book/appendix_*.ipynb); clean=()
    for nb in "${nbs[@]}"; do
      t0=$(date +%s)
      python3 - "$nb" <<'PY' 2>&1 | tail -20
import sys, nbformat, nbclient
p = sys.argv[1]
nb = nbformat.read(p, 4)
# every cell runs even past an error, so that one pass names every failing cell
try:
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": "book"}}).execute()
except Exception as e:  # a cell past its time limit (a hang): the cells before it are kept
    print(f"{p}: stopped: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
    nbformat.write(nb, p)
    sys.exit(1)
nbformat.write(nb, p)
bad = [(i, o.get("ename"), str(o.get("evalue"))[:300]) for i, c in enumerate(nb.cells) if c.cell_type == "code"
       for o in c.get("outputs", []) if o.get("output_type") == "error"]
for i, name, value in bad:
    print(f"{p}: cell {i}: {name}: {value}")
sys.exit(1 if bad else 0)
PY
      if [ "${PIPESTATUS[0]}" = 0 ]; then clean+=("$nb"); fi
      echo "$nb executed in $(( $(date +%s) - t0 )) s" | tee -a "$log/notebooks.log"
      # pack after every chapter: a call cut short by its time limit still returns what ran
      cp "$nb" "$log/" && tar czf "$OUT/$stage.tgz" -C "$log" .
    done
    # nbval re-executes each chapter in a fresh kernel; files in parallel (their timing
    # cells are not compared), cells of one file in order; only the chapters that executed
    # without an error (NBVAL=0 skips it)
    [ "${NBVAL:-1}" = 1 ] && [ ${#clean[@]} -gt 0 ] && python3 -m pytest --nbval-lax -p no:cacheprovider -n 5 \
      --dist loadfile --durations=0 "${clean[@]}" 2>&1 | tee "$log/nbval.log" | tail -25 ;;
esac
tar czf "$OUT/$stage.tgz" -C "$log" .
