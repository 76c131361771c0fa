#!/usr/bin/env bash
# The Debian packages `make test` needs, installed when missing (run by `make test` before pytest).
#
# Each line of PACKAGES is "<debian package> <probe>": the probe is a command that succeeds when the
# package's part we use is present (a file test or `command -v`), so a machine that already has
# everything pays a few stat calls (no apt, no dpkg lock) and prints nothing.
# When something is missing:
#   - as root with apt-get: `apt-get install -y --no-install-recommends` the missing ones (after one
#     `apt-get update` if the first attempt cannot find them), then probe again;
#   - otherwise, or if that install failed: ONE line on stderr naming the missing packages and the
#     command that installs them, exit status 1 (make stops at once).
# Who needs what: chromium (console browser tests, Playwright drives Debian's build); webkit2gtk-driver,
# xvfb, gir1.2-webkit2-4.1, python3-gi (the WebKitGTK tests: WebKitWebDriver + our PyGObject browser,
# tests/helpers/webkit_browser.py, under Xvfb); prometheus (the Prometheus tests: a real server scraping us);
# iproute2 (tests/multihost: `ip netns`, veth pairs, a bridge).
# Add a package by adding a line; keep one script for every system package the tests need.
set -euo pipefail

ARCH_LIB="/usr/lib/$(uname -m)-linux-gnu"
PACKAGES=(
  "chromium              command -v chromium"
  "webkit2gtk-driver     command -v WebKitWebDriver"
  "xvfb                  command -v xvfb-run"
  "gir1.2-webkit2-4.1    test -e $ARCH_LIB/girepository-1.0/WebKit2-4.1.typelib"
  "python3-gi            test -e /usr/lib/python3/dist-packages/gi/__init__.py"
  "prometheus            command -v prometheus"
  "iproute2              command -v ip"
)

missing() {
  local line pkg probe out=()
  for line in "${PACKAGES[@]}"; do
    pkg=${line%% *}
    probe=${line#"$pkg"}
    # shellcheck disable=SC2086  # the probe is a command line on purpose
    eval $probe >/dev/null 2>&1 || out+=("$pkg")
  done
  echo "${out[*]:-}"
}

need=$(missing)
[ -z "$need" ] && exit 0

cmd="apt-get install -y --no-install-recommends $need"
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing system packages for the tests: $need" >&2
  export DEBIAN_FRONTEND=noninteractive
  # shellcheck disable=SC2086
  if ! apt-get install -y -q --no-install-recommends $need >/tmp/agentfeedback-apt.log 2>&1; then
    # shellcheck disable=SC2086
    apt-get update -q >>/tmp/agentfeedback-apt.log 2>&1 &&
      apt-get install -y -q --no-install-recommends $need >>/tmp/agentfeedback-apt.log 2>&1 || true
  fi
  need=$(missing)
  [ -z "$need" ] && exit 0
  echo "missing system packages: $need (apt-get failed, see /tmp/agentfeedback-apt.log); install them with: $cmd" >&2
  exit 1
fi
echo "missing system packages: $need; install them with: sudo $cmd" >&2
exit 1
