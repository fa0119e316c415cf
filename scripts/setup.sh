#!/usr/bin/env bash
# One-time set-up on a fresh machine: Python packages, a `python3` Jupyter kernel (papermill and nbval
# run the notebooks on it), and Fashion-MNIST from Debian when missing.
# Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"

"$PYTHON" -m pip install --quiet --disable-pip-version-check -r requirements.txt
# Ray: optional for users (--backend ray), needed by tests/test_ray.py
"$PYTHON" -m pip install --quiet --disable-pip-version-check -r requirements-ray.txt
# Flower (fedlib/flower.py and its tests): its own file, see the note there on Ray
"$PYTHON" -m pip install --quiet --disable-pip-version-check -r requirements-flower.txt

kernels="$("$PYTHON" -m jupyter kernelspec list 2>/dev/null || true)"
if ! grep -qE '^\s*python3\s' <<<"$kernels"; then
  echo "setup: registering the python3 Jupyter kernel for $PYTHON"
  "$PYTHON" -m ipykernel install --user --name python3 >/dev/null
fi

if [ ! -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] \
   && [ ! -e "${FEDLIB_DATA:-data}/fashion-mnist/train-images-idx3-ubyte.gz" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "setup: installing Fashion-MNIST (Debian package dataset-fashion-mnist)"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dataset-fashion-mnist >/dev/null
  else
    echo "setup: Fashion-MNIST is missing; as root run 'apt-get install dataset-fashion-mnist'," \
         "or put its IDX files in ${FEDLIB_DATA:-data}/fashion-mnist/" >&2
  fi
fi
echo "setup: ok"
