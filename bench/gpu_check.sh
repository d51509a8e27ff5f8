#!/usr/bin/env bash
# The GPU machine check: every task's pipeline on CUDA, in one script, in under 8 minutes,
# printing one table.
#
#   bash bench/gpu_check.sh                       # a machine with an index: a fresh venv
#   WHEELS=DIR bash bench/gpu_check.sh            # no index: the machine's own torch and
#                                                 # torchvision, the rest from DIR's wheels
#                                                 # (made by python -m bench.gpu_wheels elsewhere)
#   SKIP_INSTALL=1 bash bench/gpu_check.sh        # the `python` on PATH as it is
#   PYTHON=python3.12 TASKS="detection ocr" JOBS=1 EPOCHS=2 WORK=/tmp/check bash bench/gpu_check.sh
#   CPU_OK=1 SKIP_INSTALL=1 EPOCHS=1 bash bench/gpu_check.sh   # a dry run of the script on a CPU
#
# Rows (step, status, seconds, result):
#   install          WHEELS: `pip install --no-index --no-deps --target $WORK/site DIR/*.whl`,
#                    on PYTHONPATH (the machine's torch stays); else a venv from
#                    requirements.lock, or nothing with SKIP_INSTALL
#   gpu              torch sees a CUDA device; without one every later row reads
#                    "skipped: no CUDA device" and the script exits 2
#   TASK repro       for each task in TASKS (classification detection segmentation ocr): a
#                    temp copy of the project on the task's built-in sample and recipe, EPOCHS
#                    epochs (default 3), train.device auto (the GPU), train.deterministic true:
#                    `dvc repro`, all nine stages. Result: the headline test metric, seconds per
#                    epoch and samples/s (the mean over the epochs after the first), and what
#                    train ran with (device, deterministic, precision)
#   TASK same-bytes  the train stage again from scratch (checkpoints removed, no run cache):
#                    is models/model.pt bit-identical?
#   TASK 2-workers   the same with train.num_workers 2 (DataLoader workers): bit-identical?
#   TASK predict     `python -m tools.predict` (onnxruntime, then --backend torch) on the first
#                    test images: the rows agree, and none failed
#   classification tensorrt   with TENSORRT=1 (a venv then installs tensorrt-cu13; with WHEELS,
#                    bring its wheels): export.formats [onnx, tensorrt], the TensorRT gate
# The tasks run JOBS at a time (default 4, side by side on the one GPU: their seconds per epoch
# are then those of a shared machine; JOBS=1 for timings alone). A step past the budget
# (BUDGET_S, 480 s) is not started ("skipped: over budget"). Logs stay in $WORK.
# Exit status: 0 all ok, 1 a step failed, 2 no CUDA device.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORK=${WORK:-$(mktemp -d -t gpu_check.XXXXXX)}
BUDGET_S=${BUDGET_S:-480}
TASKS=${TASKS:-classification detection segmentation ocr}
JOBS=${JOBS:-4}
EPOCHS=${EPOCHS:-3}
TABLE="$WORK/table.tsv"
mkdir -p "$WORK"
: > "$TABLE"
NO_GPU=""

row() { printf '%s\t%s\t%s\t%s\n' "$2" "$3" "$4" "$5" >> "$1"; }

# run_step TABLE NAME FUNCTION [ARGS]: its output in $WORK/NAME.log; its last line is the result.
run_step() {
  local table=$1 name=$2 fn=$3 start=$SECONDS status log
  shift 3
  log="$WORK/${name// /_}.log"
  if [ -n "$NO_GPU" ] && [ "$name" != install ] && [ "$name" != gpu ]; then
    row "$table" "$name" skipped 0 "skipped: no CUDA device"; return 1
  fi
  if [ "$SECONDS" -ge "$BUDGET_S" ]; then
    row "$table" "$name" skipped 0 "skipped: over budget (${BUDGET_S} s)"; return 1
  fi
  if "$fn" "$@" > "$log" 2>&1; then status=ok
  elif [ -n "$NO_GPU" ]; then status=skipped  # the gpu step found none: not a failure
  else status=FAIL; fi
  row "$table" "$name" "$status" $((SECONDS - start)) "$(tail -n 1 "$log" | cut -c1-120)"
  [ "$status" = ok ]
}

print_table() {
  printf '%-26s %-8s %5s  %s\n' step status s result
  while IFS=$'\t' read -r name status secs result; do
    printf '%-26s %-8s %5s  %s\n' "$name" "$status" "$secs" "$result"
  done < "$TABLE"
}

install() {
  if [ -n "${WHEELS:-}" ]; then
    PY=$(command -v "${PYTHON:-python3}")
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target "$WORK/site" "$WHEELS"/*.whl || return 1
    local versions
    versions=$(PYTHONPATH="$WORK/site" "$PY" -c 'import torch, dvc.version
print("torch", torch.__version__, "(the machine own), dvc", dvc.version.__version__)') || return 1
    echo "$(ls "$WHEELS"/*.whl | wc -l) wheels into $WORK/site; $versions"
    return 0
  fi
  if [ -n "${SKIP_INSTALL:-}" ]; then
    PY=$(command -v "${PYTHON:-python}")
    echo "skipped: SKIP_INSTALL set, using $PY"
    return 0
  fi
  "${PYTHON:-python3.11}" -m venv "$WORK/venv" || return 1  # the project's Python: 3.11
  PY="$WORK/venv/bin/python"
  "$PY" -m pip install -q -r "$ROOT/requirements.lock" || return 1
  "$PY" -m pip install -q --no-deps -e "$ROOT" || return 1
  if [ -n "${TENSORRT:-}" ]; then "$PY" -m pip install -q tensorrt-cu13==11.4.0.106 || return 1; fi
  echo "venv with torch $("$PY" -c 'import torch; print(torch.__version__)')"
}

gpu() {
  if [ -n "${CPU_OK:-}" ]; then
    "$PY" -c 'import torch; print("CPU_OK: no GPU required; CUDA available:",
                                   torch.cuda.is_available(), "torch", torch.__version__)'
    return
  fi
  if "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 3)'; then
    "$PY" -c 'import torch; print(torch.cuda.get_device_name(0), "CUDA", torch.version.cuda,
                                   "torch", torch.__version__)'
  else
    NO_GPU=1
    echo "skipped: no CUDA device"
    return 1
  fi
}

# in_project DIR CMD...: a command in a task's project, this checkout and the wheels importable.
in_project() {
  local dir=$1
  shift
  (cd "$dir" && PATH="$(dirname "$PY"):$PATH" PYTHONPATH="$ROOT${SITE:+:$SITE}" "$@")
}

repro() {
  local task=$1 dir="$WORK/$1"
  PYTHONPATH="$ROOT${SITE:+:$SITE}" "$PY" - "$ROOT" "$task" "$dir" "$EPOCHS" <<'PYTHON' || return 1
import sys

from stages.tasks import get
from tools.project import copy_project

root, task, dest, epochs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
params = {"task": task, **get(task).sample_params, "train.epochs": epochs,
          "train.warmup_epochs": 0, "train.device": "auto", "train.deterministic": True}
copy_project(root, dest, params=params)
PYTHON
  in_project "$dir" timeout 400 "$PY" -m dvc repro || return 1
  in_project "$dir" "$PY" - <<'PYTHON'
import json

from stages.tasks import current

task = current()
metric = task.headline_metric or task.val_metric
value = json.load(open("metrics/eval.json"))[metric]
record = json.load(open("logs/train.json"))
epochs = record["epochs"][1:] or record["epochs"]
seconds = sum(e["epoch_seconds"] for e in epochs) / len(epochs)
speed = sum(e["samples_per_s"] for e in epochs) / len(epochs)
on = record["trained_on"]
print(f"test {metric} {value:.4f}; {seconds:.2f} s/epoch, {speed:.0f} samples/s; "
      f"{on['device']}, {'deterministic' if on['deterministic'] else 'NOT deterministic'}, "
      f"{on['precision']}")
PYTHON
}

# retrain DIR [PARAM=VALUE]: the train stage again from scratch (its checkpoints removed, or
# it would resume from the finished run and train nothing), with the param set if given
# (train.num_workers is left out of the resume fingerprint); is model.pt the same bytes?
retrain() {
  local dir=$1 set=${2:-} before after
  before=$(sha256sum "$dir/models/model.pt" | cut -c1-16)
  rm -rf "$dir/models/checkpoints"
  if [ -n "$set" ]; then
    in_project "$dir" "$PY" -c "import sys; from tools.project import set_params
k, v = sys.argv[1].split('='); set_params('.', {k: int(v)})" "$set" || return 1
  fi
  in_project "$dir" timeout 300 "$PY" -m dvc repro --single-item --force --no-run-cache train \
    || return 1
  after=$(sha256sum "$dir/models/model.pt" | cut -c1-16)
  if [ "$before" = "$after" ]; then echo "retrained${set:+ with $set}: model.pt bit-identical ($after)"
  else echo "retrained${set:+ with $set}: model.pt differs: $before vs $after"; return 1; fi
}

same_bytes() { retrain "$WORK/$1"; }
two_workers() { retrain "$WORK/$1" train.num_workers=2; }

predict() {
  local dir="$WORK/$1"
  in_project "$dir" "$PY" - <<'PYTHON'
import csv
import subprocess
import sys

from stages.lib.params import load

paths = [r["path"] for r in csv.DictReader(open("data/split/test.csv"))][:16]
files = [f"{load('data').source}/{p}" for p in paths]
rows = {}
for backend in ("onnxruntime", "torch"):
    out = f"logs/predict-{backend}.csv"
    subprocess.run([sys.executable, "-m", "tools.predict", "--backend", backend, "--out", out,
                    "--overwrite", *files], check=True)
    rows[backend] = list(csv.DictReader(open(out)))
errors = sum(bool(r["error"]) for rs in rows.values() for r in rs)
fields = [k for k in rows["torch"][0] if k not in ("path", "error", "model")]
agree = sum(a[fields[0]] == b[fields[0]] for a, b in zip(rows["onnxruntime"], rows["torch"]))
print(f"{len(files)} test images, onnxruntime and torch: {errors} errors, {fields[0]} equal on "
      f"{agree} of {len(files)}")
sys.exit(1 if errors else 0)
PYTHON
}

# classification's TensorRT export (TENSORRT=1; needs the tensorrt package): export.formats
# [onnx, tensorrt] on the GPU-trained model, and the gate's verdict
tensorrt() {
  local dir="$WORK/$1"
  in_project "$dir" "$PY" -c "from tools.project import set_params
set_params('.', {'export.formats': ['onnx', 'tensorrt']})" || return 1
  in_project "$dir" timeout 300 "$PY" -m dvc repro export || return 1
  in_project "$dir" "$PY" - <<'PYTHON'
import json
import sys

m = json.load(open("metrics/export.json"))
h, t = m["headline"], m["tensorrt"]
if not isinstance(t, dict):
    sys.exit(f"tensorrt: {t}")
print(f"engine {t['bytes']} B; {h['metric']} {h['value']['tensorrt']:.4f} vs PyTorch "
      f"{h['value']['pytorch']:.4f} (drop {h['drop']['tensorrt']:.4f}, max {h['max_drop']})")
PYTHON
}

one_task() {
  local task=$1 table="$WORK/$1.tsv"
  : > "$table"
  if run_step "$table" "$task repro" repro "$task"; then
    run_step "$table" "$task same-bytes" same_bytes "$task"
    run_step "$table" "$task 2-workers" two_workers "$task"
    run_step "$table" "$task predict" predict "$task"
    if [ -n "${TENSORRT:-}" ] && [ "$task" = classification ]; then
      run_step "$table" "$task tensorrt" tensorrt "$task"
    fi
  else
    local why="skipped: no model (repro did not pass)" step
    [ -n "$NO_GPU" ] && why="skipped: no CUDA device"
    for step in same-bytes 2-workers predict; do row "$table" "$task $step" skipped 0 "$why"; done
  fi
}

PY=python
SITE=""
[ -n "${WHEELS:-}" ] && SITE="$WORK/site"
run_step "$TABLE" install install && export PYTHONPATH="${SITE:+$SITE:}${PYTHONPATH:-}"
run_step "$TABLE" gpu gpu
running=0
for task in $TASKS; do
  one_task "$task" &
  running=$((running + 1))
  if [ "$running" -ge "$JOBS" ]; then wait -n; running=$((running - 1)); fi
done
wait
for task in $TASKS; do cat "$WORK/$task.tsv" >> "$TABLE"; done

echo "gpu_check: logs in $WORK (total ${SECONDS} s)"
print_table
if [ -n "$NO_GPU" ]; then exit 2; fi
if cut -f2 "$TABLE" | grep -qx FAIL; then exit 1; fi
exit 0
