#!/usr/bin/env bash
# Regenerate requirements.lock: every runtime dependency of pyproject.toml (no extras: what the image
# installs), pinned with the hashes of every published file, by pip-tools' pip-compile in a throwaway
# virtualenv. Run it after changing [project] dependencies; tests/unit/test_dockerfile.py fails while
# the lock does not satisfy them.
set -euo pipefail
cd "$(dirname "$0")/.."
PIP_TOOLS_VERSION=7.7.0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q "pip-tools==$PIP_TOOLS_VERSION"
"$work/venv/bin/pip-compile" --quiet --generate-hashes --strip-extras --no-emit-index-url \
  --no-emit-find-links --output-file requirements.lock pyproject.toml
echo "wrote requirements.lock ($(grep -c '==' requirements.lock) packages)"
