#!/usr/bin/env bash
# Installs Debian's chromium for the browser test (test/e2e/admin.test.ts) when it is missing, and prints its path.
# Needs root (or sudo) and apt; does nothing when a chromium is already on PATH or CHROMIUM_PATH names one.
set -euo pipefail

find_chromium() {
  if [[ -n "${CHROMIUM_PATH:-}" && -x "${CHROMIUM_PATH}" ]]; then echo "${CHROMIUM_PATH}"; return 0; fi
  for name in chromium chromium-browser; do
    if command -v "$name" >/dev/null 2>&1; then command -v "$name"; return 0; fi
  done
  return 1
}

if path="$(find_chromium)"; then echo "$path"; exit 0; fi

sudo=""
if [[ "$(id -u)" != "0" ]]; then
  command -v sudo >/dev/null 2>&1 || { echo "install-chromium: not root and no sudo; install Debian's chromium" >&2; exit 1; }
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
echo "install-chromium: installing Debian's chromium with apt-get" >&2
$sudo apt-get update -qq >&2
$sudo apt-get install -y -qq --no-install-recommends chromium fonts-liberation >&2
find_chromium
