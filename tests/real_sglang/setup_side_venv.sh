#!/usr/bin/env bash
# Build, once, what `make test-real` runs a real SGLang 0.5.23 on CPU with:
#
#   ${XDG_CACHE_HOME:-~/.cache}/kimi-realsgl/
#     venv/               a side virtualenv: SGLang 0.5.23, torch 2.14.1 and the server's
#                         pure-Python dependencies (about 6.6 GB, so outside .venv and kept
#                         across `make clean`)
#     models/tiny-llama/  the random-weight model make_model.py writes (256 KV bytes per token)
#     kimi-ops.stamp      what was installed; while it matches this script, nothing runs again
#
# Idempotent: a second run with the same versions only checks the stamp and the imports.
# Fails loudly, exit 1, "the side virtualenv for make test-real cannot be built: ...", when pip
# cannot install (no package registry reachable) or the result does not import; it writes no
# stamp then, so the next run tries again. It never downloads a model: the model is made here.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=${XDG_CACHE_HOME:-$HOME/.cache}/kimi-realsgl
VENV=$ROOT/venv
MODEL=$ROOT/models/tiny-llama
STAMP=$ROOT/kimi-ops.stamp
LOG=$ROOT/kimi-ops-setup.log
PYTHON=${PYTHON:-python3}

TORCH=("torch==2.14.1" "torchvision==0.29.1")
SGLANG=("sglang==0.5.23")
# What SGLang 0.5.23's server imports on CPU, minus the CUDA-only kernels (its own wheel is
# installed with --no-deps because its requirements pull sglang-kernel, which is CUDA-only).
DEPS=(
  numpy aiohttp fastapi "uvicorn>=0.51" uvloop "pyzmq>=25.1.2" "transformers==5.19.0"
  "tokenizers==0.23.2" orjson msgspec pybase64 psutil setproctitle pydantic python-multipart
  "prometheus-client>=0.20.0" requests scipy tqdm regex xxhash zstandard packaging
  partial_json_parser pillow einops interegular distro "openai==2.8.0" "openai-harmony==0.0.4"
  "anthropic>=0.20.0" "llguidance<2.0.0,>=1.7.6" "xgrammar==0.2.7" "sentencepiece==0.2.1"
  tiktoken watchfiles "blobfile==3.0.0" easydict python-dateutil safetensors
  "compressed-tensors==0.18.0" gguf IPython "mistral_common>=1.11.5" "numba==0.65.1"
  "smg-grpc-servicer>=0.9.0" py-spy nvidia-ml-py dill soundfile "torch==2.14.1"
)

fail() {
  echo "the side virtualenv for make test-real cannot be built: $1" >&2
  if [ -s "$LOG" ]; then
    echo "--- last lines of $LOG ---" >&2
    tail -n 15 "$LOG" >&2
  fi
  exit 1
}

stamp_text() {
  echo "python $("$PYTHON" -c 'import sys; print(sys.version.split()[0])')"
  printf '%s\n' "${TORCH[@]}" "${SGLANG[@]}" "${DEPS[@]}"
  echo "make_model.py $(sha256sum "$HERE/make_model.py" | cut -c1-16)"
}

# Importing SGLang takes 15 s to a minute of CPU: a build checks it once; a later run, with the
# stamp in place, checks the installed versions and the model's files, which takes a second.
imports() {
  "$VENV/bin/python" -c "import sglang.launch_server" >>"$LOG" 2>&1
}
installed() {
  "$VENV/bin/python" -c "
from importlib.metadata import version
assert version('sglang') == '0.5.23' and version('torch').split('+')[0] == '2.14.1'
" >/dev/null 2>&1 && [ -f "$MODEL/config.json" ] && [ -f "$MODEL/model.safetensors" ]
}

mkdir -p "$ROOT" || fail "cannot create $ROOT"
# Two runs at once (two checkouts) would both pip-install into the same venv.
exec 9>"$ROOT/kimi-ops.lock"
flock 9

WANT=$(stamp_text)
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ] && installed; then
  echo "side virtualenv ready: $VENV (model $MODEL)"
  exit 0
fi

started=$(date +%s)
rm -f "$STAMP"
: >"$LOG"
install() {
  "$VENV/bin/python" -m pip install --disable-pip-version-check "$@" >>"$LOG" 2>&1
}
echo "building the side virtualenv in $VENV (first time: a few minutes, about 6.6 GB)"
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV" >>"$LOG" 2>&1 ||
  fail "'$PYTHON -m venv $VENV' failed"
install --upgrade pip ||
  fail "pip could not upgrade itself; is a package registry reachable?"
install "${TORCH[@]}" ||
  fail "pip could not install ${TORCH[*]}; is a package registry reachable?"
install --no-deps "${SGLANG[@]}" ||
  fail "pip could not install ${SGLANG[*]}; is a package registry reachable?"
install "${DEPS[@]}" ||
  fail "pip could not install SGLang's dependencies; is a package registry reachable?"
imports || fail "SGLang 0.5.23 is installed but 'import sglang.launch_server' fails"
# Rewritten whenever the stamp is (make_model.py may have changed); it takes seconds.
"$VENV/bin/python" "$HERE/make_model.py" "$MODEL" >>"$LOG" 2>&1 ||
  fail "make_model.py could not write the tiny model to $MODEL"
installed || fail "the side virtualenv or the model is incomplete after the build"
echo "$WANT" >"$STAMP.tmp" && mv "$STAMP.tmp" "$STAMP"
echo "side virtualenv built in $(($(date +%s) - started)) s: $VENV (model $MODEL)"
