#!/usr/bin/env bash
# The GPU machine check: one script, end to end in under 8 minutes, printing one table.
#
#   bash bench/gpu_check.sh                  # from anywhere, on a machine with an NVIDIA GPU
#   SKIP_INSTALL=1 bash bench/gpu_check.sh   # use the `python` on PATH as it is (no venv)
#   PYTHON=/path/to/python3.11 WORK=/tmp/check bash bench/gpu_check.sh
#
# Rows (step, status, seconds, result):
#   install      a fresh venv: requirements.lock, the project, tensorrt-cu13 (torch's CUDA 13)
#   gpu          torch sees a CUDA device; without one every later row reads
#                "skipped: no CUDA device" and the script exits 2
#   bf16         `dvc repro` of the built-in sample in a temp copy, train.precision bf16, with
#                export.formats [onnx, openvino, onnx_int8, tensorrt]: test accuracy
#   deterministic   the train stage forced again (no run cache) with train.deterministic:
#                is models/model.pt bit-identical?
#   tensorrt     the bf16 run's TensorRT export: its metric drop against PyTorch (the gate
#                passed, or the bf16 row failed with the gate's message)
#   fp16         the same copy with train.precision fp16 (a GradScaler): `dvc repro`, accuracy
#                and the TensorRT gate again
#   predict      bench/deploy.py --device cuda: images/s at batch 64 on the GPU (PyTorch eager,
#                TensorRT) as ratios to onnxruntime fp32 on the CPU, same images
# A step past the 8-minute budget is not started ("skipped: over budget"). Logs stay in $WORK.
# Exit status: 0 all ok, 1 a step failed, 2 no CUDA device.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORK=${WORK:-$(mktemp -d -t gpu_check.XXXXXX)}
BUDGET_S=${BUDGET_S:-480}
TABLE="$WORK/table.tsv"
PROJECT="$WORK/project"
: > "$TABLE"
FAILED=0
NO_GPU=""

row() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >> "$TABLE"; }

# run_step NAME FUNCTION: run it with its output in $WORK/NAME.log; its last line is the result.
run_step() {
  local name=$1 fn=$2 start=$SECONDS status
  if [ -n "$NO_GPU" ] && [ "$name" != install ] && [ "$name" != gpu ]; then
    row "$name" skipped 0 "skipped: no CUDA device"; return
  fi
  if [ "$SECONDS" -ge "$BUDGET_S" ]; then
    row "$name" skipped 0 "skipped: over budget (${BUDGET_S} s)"; return
  fi
  if "$fn" > "$WORK/$name.log" 2>&1; then status=ok
  elif [ -n "$NO_GPU" ]; then status=skipped  # the gpu step found none: not a failure
  else status=FAIL; FAILED=1; fi
  row "$name" "$status" $((SECONDS - start)) "$(tail -n 1 "$WORK/$name.log" | cut -c1-110)"
}

print_table() {
  printf '%-14s %-8s %5s  %s\n' step status s result
  while IFS=$'\t' read -r name status secs result; do
    printf '%-14s %-8s %5s  %s\n' "$name" "$status" "$secs" "$result"
  done < "$TABLE"
}

install() {
  if [ -n "${SKIP_INSTALL:-}" ]; then
    PY=$(command -v python)
    echo "skipped: SKIP_INSTALL set, using $PY"
    return 0
  fi
  "${PYTHON:-python3.11}" -m venv "$WORK/venv" || return 1  # the project's Python: 3.11
  PY="$WORK/venv/bin/python"
  "$PY" -m pip install -q -r "$ROOT/requirements.lock" || return 1
  "$PY" -m pip install -q --no-deps -e "$ROOT" || return 1
  "$PY" -m pip install -q tensorrt-cu13==11.4.0.106 || return 1
  echo "venv with $("$PY" -c 'import tensorrt, torch; print("torch", torch.__version__, "tensorrt", tensorrt.__version__)')"
}

gpu() {
  if "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 3)'; then
    "$PY" -c 'import torch; print(torch.cuda.get_device_name(0), "CUDA", torch.version.cuda)'
  else
    NO_GPU=1
    echo "skipped: no CUDA device"
    return 1
  fi
}

# py CODE: python in the temp project, with this checkout's modules importable.
py() { (cd "$PROJECT" && PYTHONPATH="$ROOT" "$PY" -c "$1"); }
accuracy() { py 'import json; print("test accuracy", json.load(open("metrics/eval.json"))["accuracy"])'; }
dvc_in() { (cd "$PROJECT" && PATH="$(dirname "$PY"):$PATH" timeout 240 "$PY" -m dvc "$@"); }

bf16() {
  PYTHONPATH="$ROOT" "$PY" -c "
from tools.project import copy_project
copy_project('$ROOT', '$PROJECT', params={'train.precision': 'bf16',
             'export.formats': ['onnx', 'openvino', 'onnx_int8', 'tensorrt']})" || return 1
  dvc_in repro || return 1
  accuracy
}

deterministic() {
  local before after
  before=$(sha256sum "$PROJECT/models/model.pt" | cut -c1-16)
  dvc_in repro --single-item --force --no-run-cache train || return 1
  after=$(sha256sum "$PROJECT/models/model.pt" | cut -c1-16)
  if [ "$before" = "$after" ]; then echo "model.pt bit-identical ($after)"
  else echo "model.pt differs: $before vs $after"; return 1; fi
}

tensorrt() {
  (cd "$PROJECT" && "$PY" - <<'PYTHON'
import json
import sys

m = json.load(open("metrics/export.json"))
h, t = m["headline"], m["tensorrt"]
if not isinstance(t, dict):
    sys.exit(f"tensorrt: {t}")
print(f"engine {t['bytes']} B; {h['metric']} {h['value']['tensorrt']:.4f} vs PyTorch "
      f"{h['value']['pytorch']:.4f} (drop {h['drop']['tensorrt']:.4f}, max {h['max_drop']}); "
      f"top-1 agreement {t.get('top1_agreement', 0):.3f} vs onnxruntime")
PYTHON
  )
}

fp16() {
  (cd "$PROJECT" && PYTHONPATH="$ROOT" "$PY" -c "
from tools.project import set_params
set_params('.', {'train.precision': 'fp16'})") || return 1
  dvc_in repro || return 1
  echo "$(accuracy); $(tensorrt)"
}

predict() {
  (cd "$ROOT" && PYTHONPATH="$ROOT" timeout 240 "$PY" bench/deploy.py --project "$PROJECT" \
     --device cuda --threads "$(nproc)") > "$WORK/deploy.txt" || return 1
  cat "$WORK/deploy.txt"
  # "name words  b1 ratio  b64 ratio  metric": the batch-64 ratio of each CUDA row
  awk '/CUDA\)/ { name = $1; for (i = 2; i <= NF - 5; i++) name = name " " $i;
                   out = out name " " $(NF - 1) "x, " }
       END { print "batch 64 vs onnxruntime fp32 on CPU: " out }' "$WORK/deploy.txt"
}

PY=python
run_step install install
run_step gpu gpu
run_step bf16 bf16
run_step deterministic deterministic
run_step tensorrt tensorrt
run_step fp16 fp16
run_step predict predict

echo "gpu_check: logs in $WORK (total ${SECONDS} s)"
print_table
if [ -n "$NO_GPU" ]; then exit 2; fi
exit "$FAILED"
