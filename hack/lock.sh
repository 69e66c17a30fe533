#!/usr/bin/env bash
# Regenerate the image locks, pinned with the hashes of every published file, by pip-tools'
# pip-compile in a throwaway virtualenv:
#   requirements.lock         every runtime dependency of pyproject.toml, no extras: what the manager
#                             image (the Dockerfile's default target) installs;
#   requirements-sloapi.lock  the same plus the `sloapi` extra (FastAPI, uvicorn): what the SLO API
#                             image (--target slo-api) installs. It starts from requirements.lock's
#                             pins, so the two images share every version they both carry.
# Run it after changing [project] dependencies or the sloapi extra; tests/unit/test_dockerfile.py
# fails while a lock does not satisfy them.
set -euo pipefail
cd "$(dirname "$0")/.."
PIP_TOOLS_VERSION=7.7.0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q "pip-tools==$PIP_TOOLS_VERSION"
compile() {
  "$work/venv/bin/pip-compile" --quiet --generate-hashes --strip-extras --no-emit-index-url \
    --no-emit-find-links "$@" pyproject.toml
}
compile --output-file requirements.lock
[ -f requirements-sloapi.lock ] || cp requirements.lock requirements-sloapi.lock
compile --extra sloapi --output-file requirements-sloapi.lock
for lock in requirements.lock requirements-sloapi.lock; do
  echo "wrote $lock ($(grep -c '==' "$lock") packages)"
done
