#!/usr/bin/env bash
# Build the documentation site from docs/ (mkdocs.yml), with every warning an error.
#
#   bash scripts/build_docs.sh          # build into site/ (mkdocs build --strict)
#   bash scripts/build_docs.sh serve    # serve it on http://127.0.0.1:8000, rebuilt on each edit
#
# The tools live in .venv/docs (override the folder with NLS_VENV_ROOT, the interpreter with
# PYTHON), installed from requirements/docs.txt; a stamp file skips the install when nothing
# changed. That environment has no TensorFlow: the API reference is read from the source
# statically, so a page that needed to import the package would fail the build.
set -euo pipefail
export NO_MKDOCS_2_WARNING=1   # the theme's notice about its successor, printed on every build
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${NLS_VENV_ROOT:-$here/.venv}/docs"
python="${PYTHON:-python3}"
requirements="$here/requirements/docs.txt"
stamp="$venv/.requirements-docs.txt"

if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv"
fi
if ! cmp -s "$requirements" "$stamp"; then
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements"
  cp "$requirements" "$stamp"
fi

cd "$here"
case "${1:-build}" in
  build) exec "$venv/bin/mkdocs" build --strict --site-dir "${NLS_DOCS_SITE:-$here/site}" ;;
  serve) exec "$venv/bin/mkdocs" serve --strict ;;
  *) echo "usage: bash scripts/build_docs.sh [build|serve]" >&2; exit 2 ;;
esac
