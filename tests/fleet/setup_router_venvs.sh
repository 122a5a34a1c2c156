#!/usr/bin/env bash
# Build, once, a side virtualenv per sglang-router version the fleet's tests run for real:
#
#   ${XDG_CACHE_HOME:-~/.cache}/kimi-router/<version>/
#     venv/             python -m venv with sglang-router==<version> and its dependencies
#     kimi-ops.stamp    what was installed; while it matches this script, nothing runs again
#
# The router is a Rust binary in the wheel and runs without a GPU. One venv per version because
# each generation has its own worker API (docs/router.md). Idempotent; prints each venv's python,
# one per line. Fails loudly, exit 1, "the router's side virtualenv cannot be built: ...", when
# pip cannot install (no package registry reachable); it writes no stamp then.
set -euo pipefail

ROOT=${XDG_CACHE_HOME:-$HOME/.cache}/kimi-router
PYTHON=${PYTHON:-python3}
# One release per worker-API generation: 0.1.x query-string routes, 0.2.x /workers/{url},
# 0.3.x the /workers job API.
VERSIONS=(${KIMI_ROUTER_VERSIONS:-0.1.9 0.2.4 0.3.2})

build() {
  local version=$1 dir=$ROOT/$1
  local stamp=$dir/kimi-ops.stamp log=$dir/kimi-ops-setup.log
  local want="sglang-router==$version python $("$PYTHON" -c 'import sys; print(sys.version.split()[0])')"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$dir/venv/bin/python" ]; then
    echo "$dir/venv/bin/python"
    return
  fi
  mkdir -p "$dir"
  rm -f "$stamp"
  if ! { "$PYTHON" -m venv --clear "$dir/venv" &&
         "$dir/venv/bin/pip" install -q "sglang-router==$version"; } >"$log" 2>&1; then
    echo "the router's side virtualenv cannot be built: pip install sglang-router==$version failed" >&2
    tail -n 15 "$log" >&2
    exit 1
  fi
  if ! "$dir/venv/bin/python" -c "import sglang_router.launch_router" >>"$log" 2>&1; then
    echo "the router's side virtualenv cannot be built: sglang-router==$version does not import" >&2
    tail -n 15 "$log" >&2
    exit 1
  fi
  echo "$want" >"$stamp"
  echo "$dir/venv/bin/python"
}

for version in "${VERSIONS[@]}"; do
  build "$version"
done
