#!/usr/bin/env bash
# The guide's benchmark runner (its code block 2): runs fa2_benchmark on the
# data in DATA_DIR with the guide's default configuration (B=2, S=512, H=12,
# D=64, fp16, 20 runs after 3 warm-ups, 128x64 tiles), the causal mask file,
# and saves the output, the text log and the run's JSON in OUTPUT_DIR.
# --variants also runs the guide's tile table (section 5: 64x64, 128x64,
# 128x128, 256x128) on the same data and prints one summary line per run,
# read from each run's JSON.
#
# usage: scripts/run_fa2_benchmark.sh [--binary ./install/bin/fa2_benchmark]
#            [--data-dir ./test_data] [--output-dir ./benchmark_results]
#            [--batch 2] [--seq-q 512] [--seq-kv =seq-q] [--heads 12]
#            [--head-dim 64] [--dtype fp16] [--num-runs 20] [--warmup-runs 3]
#            [--tile-q 128] [--tile-kv 64] [--variants] [--verify]
#            [-- EXTRA BENCHMARK FLAGS...]
# Missing input files are generated first (scripts/gen_fa2_test_data.py, the
# configuration's shape and dtype, causal mask).  --verify checks each
# output against the float64 reference (scripts/verify_correctness.py).
# Exit status: 0 every run passed (and verified); 1 a run or a verification
# failed; 2 bad arguments.
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
usage_error() { echo "run_fa2_benchmark.sh: $*" >&2; exit 2; }

BINARY=./install/bin/fa2_benchmark DATA_DIR=./test_data OUTPUT_DIR=./benchmark_results
BATCH=2 SEQ_Q=512 SEQ_KV="" HEADS=12 HEAD_DIM=64 DTYPE=fp16 NUM_RUNS=20 WARMUP_RUNS=3 TILE_Q=128 TILE_KV=64
VARIANTS=0 VERIFY=0 EXTRA=()
need() { [ "$2" -ge 2 ] || usage_error "$1 needs a value"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) need "$1" $#; BINARY=$2; shift 2 ;;
    --data-dir) need "$1" $#; DATA_DIR=$2; shift 2 ;;
    --output-dir) need "$1" $#; OUTPUT_DIR=$2; shift 2 ;;
    --batch) need "$1" $#; BATCH=$2; shift 2 ;;
    --seq-q) need "$1" $#; SEQ_Q=$2; shift 2 ;;
    --seq-kv) need "$1" $#; SEQ_KV=$2; shift 2 ;;
    --heads) need "$1" $#; HEADS=$2; shift 2 ;;
    --head-dim) need "$1" $#; HEAD_DIM=$2; shift 2 ;;
    --dtype) need "$1" $#; DTYPE=$2; shift 2 ;;
    --num-runs) need "$1" $#; NUM_RUNS=$2; shift 2 ;;
    --warmup-runs) need "$1" $#; WARMUP_RUNS=$2; shift 2 ;;
    --tile-q) need "$1" $#; TILE_Q=$2; shift 2 ;;
    --tile-kv) need "$1" $#; TILE_KV=$2; shift 2 ;;
    --variants) VARIANTS=1; shift ;;
    --verify) VERIFY=1; shift ;;
    --) shift; EXTRA=("$@"); break ;;
    -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) usage_error "unknown argument '$1' (see --help)" ;;
  esac
done
SEQ_KV=${SEQ_KV:-$SEQ_Q}
for pair in "--batch:$BATCH" "--seq-q:$SEQ_Q" "--seq-kv:$SEQ_KV" "--heads:$HEADS" "--head-dim:$HEAD_DIM" \
            "--num-runs:$NUM_RUNS" "--tile-q:$TILE_Q" "--tile-kv:$TILE_KV"; do
  case "${pair#*:}" in ''|*[!0-9]*|0) usage_error "${pair%%:*}: '${pair#*:}' is not a positive integer" ;; esac
done
case "$WARMUP_RUNS" in ''|*[!0-9]*) usage_error "--warmup-runs: '$WARMUP_RUNS' is not a non-negative integer" ;; esac
case "$DTYPE" in fp16|bf16|fp32) ;; *) usage_error "--dtype: '$DTYPE' is not fp16, bf16 or fp32" ;; esac
[ -x "$BINARY" ] || usage_error "--binary: '$BINARY' is not an executable (build and install: scripts/build_flash_attention.sh 2 auto ./install)"
PYTHON=""
for candidate in python3 /usr/bin/python3; do
  if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c "import numpy" 2>/dev/null; then PYTHON=$candidate; break; fi
done

# The inputs: the guide's files, generated for this configuration when absent.
if [ ! -f "$DATA_DIR/input_Q.bin" ] || [ ! -f "$DATA_DIR/input_K.bin" ] || [ ! -f "$DATA_DIR/input_V.bin" ] \
   || [ ! -f "$DATA_DIR/input_causal_mask.bin" ]; then
  [ -n "$PYTHON" ] || usage_error "no input files in '$DATA_DIR' and no Python with NumPy to generate them (apt-get install python3-numpy)"
  echo "Generating test data in $DATA_DIR (B=$BATCH S=$SEQ_Q/$SEQ_KV H=$HEADS D=$HEAD_DIM $DTYPE, causal)..."
  "$PYTHON" "$REPO/scripts/gen_fa2_test_data.py" --output-dir "$DATA_DIR" --batch-size "$BATCH" --seq-len-q "$SEQ_Q" \
    --seq-len-kv "$SEQ_KV" --num-heads "$HEADS" --head-dim "$HEAD_DIM" --dtype "$DTYPE" >/dev/null || exit 1
fi
mkdir -p "$OUTPUT_DIR" || exit 1

TILES="${TILE_Q}x${TILE_KV}"
[ "$VARIANTS" = 1 ] && TILES="$TILES 64x64 128x64 128x128 256x128"
declare -A SEEN=()
FAILED=0
JSONS=()
for tile in $TILES; do
  [ -z "${SEEN[$tile]:-}" ] || continue
  SEEN[$tile]=1
  tq=${tile%x*} tkv=${tile#*x}
  name=b${BATCH}_s${SEQ_Q}_h${HEADS}_d${HEAD_DIM}_tq${tq}_tkv${tkv}_${DTYPE}
  OUTPUT_FILE=$OUTPUT_DIR/output_$name.bin
  LOG_FILE=$OUTPUT_DIR/benchmark_log_$name.txt
  JSON_FILE=$OUTPUT_DIR/result_$name.json
  echo "=========================================="
  echo "  Running FA2 Benchmark"
  echo "  Config: B=${BATCH} S=${SEQ_Q} H=${HEADS} D=${HEAD_DIM}"
  echo "  Tile: Q=${tq} KV=${tkv}  Dtype=${DTYPE}"
  echo "=========================================="
  "$BINARY" \
    --input-q="$DATA_DIR/input_Q.bin" \
    --input-k="$DATA_DIR/input_K.bin" \
    --input-v="$DATA_DIR/input_V.bin" \
    --causal-mask="$DATA_DIR/input_causal_mask.bin" \
    --batch-size="$BATCH" --seq-q="$SEQ_Q" --seq-kv="$SEQ_KV" --num-heads="$HEADS" --head-dim="$HEAD_DIM" \
    --dtype="$DTYPE" --num-runs="$NUM_RUNS" --warmup-runs="$WARMUP_RUNS" --tile-q="$tq" --tile-kv="$tkv" \
    --output="$OUTPUT_FILE" --json-file="$JSON_FILE" ${EXTRA[@]+"${EXTRA[@]}"} 2>&1 | tee "$LOG_FILE"
  if [ "${PIPESTATUS[0]}" != 0 ]; then
    echo "FAILED: tile ${tq}x${tkv} (log: $LOG_FILE)"
    FAILED=$((FAILED + 1))
    continue
  fi
  echo ""
  echo "Output saved to: $OUTPUT_FILE"
  echo "Log saved to:    $LOG_FILE"
  JSONS+=("$JSON_FILE")
  if [ "$VERIFY" = 1 ]; then
    [ -n "$PYTHON" ] || usage_error "--verify needs a Python with NumPy (apt-get install python3-numpy)"
    if ! "$PYTHON" "$REPO/scripts/verify_correctness.py" "$OUTPUT_FILE" "$DATA_DIR/input_Q.bin" "$DATA_DIR/input_K.bin" \
           "$DATA_DIR/input_V.bin" | tee -a "$LOG_FILE"; then
      FAILED=$((FAILED + 1))
    fi
  fi
done

# One line per run, from its JSON (not from the text lines).
if [ ${#JSONS[@]} -gt 0 ] && command -v python3 >/dev/null 2>&1; then
  echo ""
  echo "Summary ($(basename "$BINARY"), from each run's JSON):"
  python3 - "${JSONS[@]}" <<'PY'
import json, sys
rows = [json.load(open(p)) for p in sys.argv[1:]]
best = max(r["throughput_tflops"] for r in rows)
for r in rows:
    mark = "  <- best" if len(rows) > 1 and r["throughput_tflops"] == best else ""
    print(f"  tile {r['tile_q']:>3}x{r['tile_kv']:<3}  {r['kernel']:<12} {r['latency_ms']:9.4f} ms  "
          f"{r['throughput_tflops']:.5f} TFLOPS{mark}")
PY
fi
[ $FAILED -eq 0 ]
