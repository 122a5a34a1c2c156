#!/usr/bin/env bash
# The Docker daemon and the image `make test-docker` runs its containers on.
#
#   tests/docker/setup_docker.sh start   a daemon that answers, and the image imported
#   tests/docker/setup_docker.sh stop    stop the daemon `start` started (none otherwise)
#
# `start` is idempotent. It installs Debian's docker.io when there is no dockerd (as root),
# uses the daemon at $DOCKER_HOST or /var/run/docker.sock when one answers, and otherwise
# starts one of its own: vfs storage (works on any file system, overlay or not), no bridge and
# no iptables rules (the containers use the host's network), its data, exec root, pid file and
# socket under paths of its own so it never meets another daemon on the host. Which daemon the
# tests use is written to $STATE/docker_host; $STATE/started says that `start` started it, so
# `stop` stops only that one.
#
# The image (kimi-ops-test:empty) is `docker import`ed from a tarball of empty directories: no
# registry is reachable here. The tests bind-mount the host's /usr and /lib, the checkout and
# its virtualenv read-only into each container and run the simulator from them.
set -euo pipefail

STATE=${KIMI_DOCKER_STATE:-/run/kimi-ops-docker}
DATA_ROOT=${KIMI_DOCKER_DATA_ROOT:-/var/lib/kimi-ops-docker}
OWN_SOCKET=unix://$STATE/docker.sock
IMAGE=kimi-ops-test:empty
LOG=$STATE/dockerd.log

fail() {
  echo "the Docker daemon for make test-docker cannot be set up: $1" >&2
  if [ -s "$LOG" ]; then
    echo "--- last lines of $LOG ---" >&2
    tail -n 15 "$LOG" >&2
  fi
  exit 1
}

answers() {
  DOCKER_HOST=$1 docker info --format '{{.ServerVersion}}' >/dev/null 2>&1
}

install_docker() {
  if command -v dockerd >/dev/null 2>&1 && command -v docker >/dev/null 2>&1; then
    return
  fi
  [ "$(id -u)" = 0 ] || fail "dockerd is not installed and this is not root (apt-get needs root)"
  echo "installing Debian's docker.io" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq || fail "apt-get update failed"
  apt-get install -y -qq docker.io >/dev/null || fail "apt-get install docker.io failed"
}

start_daemon() {
  [ "$(id -u)" = 0 ] || fail "no Docker daemon answers and starting dockerd needs root"
  mkdir -p "$STATE" "$DATA_ROOT"
  echo "starting dockerd on $OWN_SOCKET (log: $LOG)" >&2
  setsid dockerd \
    --storage-driver vfs --bridge none --iptables=false --ip6tables=false \
    --data-root "$DATA_ROOT" --exec-root "$STATE/exec" --pidfile "$STATE/dockerd.pid" \
    --host "$OWN_SOCKET" >"$LOG" 2>&1 </dev/null &
  for _ in $(seq 1 120); do
    if answers "$OWN_SOCKET"; then
      touch "$STATE/started"
      return
    fi
    if [ -s "$STATE/dockerd.pid" ] && ! kill -0 "$(cat "$STATE/dockerd.pid")" 2>/dev/null; then
      fail "dockerd exited at start"
    fi
    sleep 0.5
  done
  fail "dockerd did not answer on $OWN_SOCKET within 60 s"
}

import_image() {
  if DOCKER_HOST=$1 docker image inspect "$IMAGE" >/dev/null 2>&1; then
    return
  fi
  local root
  root=$(mktemp -d)
  mkdir -p "$root"/{usr,lib,lib64,bin,sbin,etc,tmp,proc,sys,dev,run,var,root,work}
  chmod 1777 "$root/tmp"
  tar -C "$root" -cf "$root.tar" .
  DOCKER_HOST=$1 docker import "$root.tar" "$IMAGE" >/dev/null || fail "docker import failed"
  rm -rf "$root" "$root.tar"
}

start() {
  install_docker
  mkdir -p "$STATE"
  local host=""
  for candidate in "${DOCKER_HOST:-}" unix:///var/run/docker.sock "$OWN_SOCKET"; do
    if [ -n "$candidate" ] && answers "$candidate"; then
      host=$candidate
      break
    fi
  done
  if [ -z "$host" ]; then
    start_daemon
    host=$OWN_SOCKET
  fi
  import_image "$host"
  echo "$host" >"$STATE/docker_host"
  echo "Docker daemon at $host ($(DOCKER_HOST=$host docker info --format '{{.ServerVersion}}'))," \
    "image $IMAGE" >&2
}

stop() {
  if [ ! -e "$STATE/started" ]; then
    echo "no Docker daemon started by this script to stop" >&2
    return
  fi
  local pid
  pid=$(cat "$STATE/dockerd.pid" 2>/dev/null || true)
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    for _ in $(seq 1 60); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.5
    done
    if kill -0 "$pid" 2>/dev/null; then
      echo "dockerd (pid $pid) did not stop within 30 s; killing it" >&2
      kill -KILL "$pid"
    fi
  fi
  rm -f "$STATE/started" "$STATE/docker_host"
  echo "stopped the Docker daemon this script started" >&2
}

case "${1:-start}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 [start|stop]" >&2; exit 2 ;;
esac
