#!/usr/bin/env bash
# Time `make test` as CI runs it: a fresh clone of this checkout's HEAD beside it (a sibling
# directory), then `make test` (virtualenv creation included; the control-plane binaries come from
# ~/.cache/escaler when cached). Prints the commit, the exit status, the wall clock and the
# machine's busy and idle core-seconds over the run (/proc/stat), the figures docs/testing.md
# quotes. The clone is left in place for its .test-results/ (hack/slowest.py reads them).
#
# Usage: hack/timed-make-test.sh NAME     (clones into ../NAME, replacing it)
set -u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
name=${1:?usage: hack/timed-make-test.sh NAME}
dest="$(dirname "$here")/$name"
rm -rf "$dest" && git clone -q "$here" "$dest" && cd "$dest" || exit 1
cpu() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9, $5+$6}' /proc/stat; }
read -r busy0 idle0 < <(cpu)
start=$(date +%s)
echo "commit $(git rev-parse --short HEAD), started $(date -u +%FT%TZ)"
make test
rc=$?
end=$(date +%s)
read -r busy1 idle1 < <(cpu)
hz=$(getconf CLK_TCK)
echo "commit $(git rev-parse --short HEAD): make test exit $rc, wall $((end - start)) s," \
     "busy $(((busy1 - busy0) / hz)) core-s, idle $(((idle1 - idle0) / hz)) core-s"
exit $rc
