#!/usr/bin/env bash
# One-time set-up on a fresh machine: Python packages, this checkout's fedlib installed editable (so any
# kernel, working directory or editor imports it), a `python3` Jupyter kernel (papermill, nbval and
# JupyterLab run the notebooks on it), and from Debian when missing: Fashion-MNIST, and Chromium for the
# browser test of the notebooks.
# Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"

"$PYTHON" -m pip install --quiet --disable-pip-version-check -r requirements.txt
# Ray: optional for users (--backend ray), needed by tests/runs/test_ray.py
"$PYTHON" -m pip install --quiet --disable-pip-version-check -r requirements-ray.txt
# Flower (fedlib/flower.py and its tests): its own file, see the note there on Ray
"$PYTHON" -m pip install --quiet --disable-pip-version-check -r requirements-flower.txt

# fedlib itself, editable: imports resolve to this checkout (its params/, archive/ and data/ included)
here="$(pwd -P)"
installed="$(cd / && "$PYTHON" -c 'import fedlib, pathlib; print(pathlib.Path(fedlib.__file__).resolve().parents[1])' \
             2>/dev/null || true)"
if [ "$installed" != "$here" ]; then
  echo "setup: installing fedlib from $here (pip install -e .)"
  "$PYTHON" -m pip install --quiet --disable-pip-version-check --no-deps -e .
fi

kernels="$("$PYTHON" -m jupyter kernelspec list 2>/dev/null || true)"
if ! grep -qE '^\s*python3\s' <<<"$kernels"; then
  echo "setup: registering the python3 Jupyter kernel for $PYTHON"
  "$PYTHON" -m ipykernel install --user --name python3 >/dev/null
fi

apt_install() {  # apt_install WHAT PACKAGE: install a Debian package as root, else say how
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "setup: installing $1 (Debian package $2)"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null
  else
    echo "setup: $1 is missing; as root run 'apt-get install $2'${3:+, $3}" >&2
  fi
}

if [ ! -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] \
   && [ ! -e "${FEDLIB_DATA:-data}/fashion-mnist/train-images-idx3-ubyte.gz" ]; then
  apt_install Fashion-MNIST dataset-fashion-mnist "or put its IDX files in ${FEDLIB_DATA:-data}/fashion-mnist/"
fi

# the browser test (tests/papers/test_notebooks_browser.py) drives this Chromium through Playwright; no browser download
if [ ! -x "${FEDLIB_CHROMIUM:-/usr/bin/chromium}" ]; then
  apt_install Chromium chromium
fi
echo "setup: ok"
