#!/usr/bin/env bash
# Makes sure a headless Chromium is installed, because braid's dashboard is
# tested in a real browser. As root on Debian/Ubuntu it installs it with
# apt-get; otherwise it says exactly what to install. BRAID_CHROMIUM names a
# Chrome or Chromium binary to use instead.
set -euo pipefail

have_browser() {
  if [ -n "${BRAID_CHROMIUM:-}" ]; then
    command -v "$BRAID_CHROMIUM" >/dev/null 2>&1 && return 0
    echo "setup: BRAID_CHROMIUM=$BRAID_CHROMIUM is not an executable" >&2
    return 1
  fi
  for b in chromium chromium-browser google-chrome google-chrome-stable chrome; do
    command -v "$b" >/dev/null 2>&1 && return 0
  done
  return 1
}

if have_browser; then
  exit 0
fi

if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1 && [ -z "${BRAID_CHROMIUM:-}" ]; then
  echo "setup: installing Chromium with apt-get for the dashboard's browser test" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq chromium >/dev/null
  have_browser && exit 0
  echo "setup: apt-get install chromium finished but no chromium is on PATH" >&2
  exit 1
fi

cat >&2 <<'MSG'
setup: Chromium is missing; the dashboard's browser test needs it.
Install it, then run make again:
  Debian:         sudo apt-get install -y chromium
  Ubuntu:         sudo snap install chromium   (or a Debian chromium package)
  Fedora:         sudo dnf install -y chromium
  macOS:          brew install --cask chromium
or set BRAID_CHROMIUM to a Chrome or Chromium binary.
MSG
exit 1
