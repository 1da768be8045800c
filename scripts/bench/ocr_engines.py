#!/usr/bin/env python3
"""Benchmark: the PP-OCRv4 text detector (data/models/ppocrv4/det.onnx, unchanged FP32; --model rec:
the recognizer, on a batch of 6 lines 320 wide and one line 960 wide) under
ONNX Runtime and under OpenVINO on this CPU, at the input sizes vidcurate feeds it: a 720p frame
raised to a short side of 736 (1312 x 736, the default `rapidocr` profile), the same frame capped at
a long side of 960 (960 x 544, `det_profile = "paddleocr"`), and a small image raised to 736 (736 x
736). Issue 48 asks whether OpenVINO runs this detector 2-3x faster on x86, as RapidOCR's own
comparisons found; this measures it here.

Both engines take the same random input (the detector's speed does not depend on the pixels),
run --warmup times untimed, then --repeat times; the median is reported, per engine, size and
thread count, with the ratio ORT/OpenVINO (> 1: OpenVINO faster) and the largest difference of
their outputs (the same model should give the same probability map).

Engines: onnxruntime 1.31.1 (the wheel vidcurate loads, from data/venv-rapidocr) and openvino
2026.4.1 (PyPI, made into data/venv-openvino when missing). Each runs in its own interpreter, so
neither's thread pool disturbs the other.

  scripts/bench/ocr_engines.py [--repeat 10] [--threads 1,2]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
MODELS = REPO / "data/models/ppocrv4"
ORT_PY = REPO / "data/venv-rapidocr/bin/python"
OV_VENV = REPO / "data/venv-openvino"
OV_VERSION = "2026.4.1"
# (batch, height, width) per model: the detector at a 720p frame raised to 736, capped at 960, and
# a small image raised; the recognizer on a batch of 6 lines 320 wide (RapidOCR's batch) and one
# long line.
SIZES = {
    "det": [(1, 736, 1312), (1, 544, 960), (1, 736, 736)],
    "rec": [(6, 48, 320), (1, 48, 960)],
}

RUNNER = textwrap.dedent(
    """
    import json, sys, time
    import numpy as np
    engine, model, threads, warmup, repeat, sizes, dump = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), json.loads(sys.argv[6]), sys.argv[7]
    PRECISION = sys.argv[8]
    rng = np.random.default_rng(0)
    if engine == "ort":
        import onnxruntime as ort
        o = ort.SessionOptions()
        o.intra_op_num_threads = threads
        o.inter_op_num_threads = 1
        s = ort.InferenceSession(model, o, providers=["CPUExecutionProvider"])
        name = s.get_inputs()[0].name
        run = lambda x: s.run(None, {name: x})[0]
        version = ort.__version__
    else:
        import openvino as ov
        core = ov.Core()
        m = core.read_model(model)
        cache = {}
        def run(x):
            key = x.shape
            if key not in cache:
                c = core.compile_model(m, "CPU", {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": PRECISION})
                cache[key] = c.create_infer_request()
            r = cache[key]
            r.infer({0: x})
            return r.get_output_tensor(0).data.copy()
        version = ov.__version__
    out = {"version": version, "sizes": {}}
    outputs = {}
    for n, h, w in sizes:
        x = rng.standard_normal((n, 3, h, w), dtype=np.float32)
        for _ in range(warmup):
            y = run(x)
        times = []
        for _ in range(repeat):
            t = time.perf_counter()
            y = run(x)
            times.append(time.perf_counter() - t)
        out["sizes"][f"{n}x{w}x{h}"] = times
        outputs[f"{n}x{w}x{h}"] = y
    np.savez(dump, **outputs)
    print(json.dumps(out))
    """
)


def ensure_openvino() -> Path:
    py = OV_VENV / "bin/python"
    # A missing venv is made (a fresh clone has none), as is one with another version.
    ok = py.exists() and subprocess.run([str(py), "-c", f"import openvino, sys; sys.exit(openvino.__version__.split('-')[0] != '{OV_VERSION}')"],
                                        capture_output=True).returncode == 0
    if not ok:
        subprocess.run([sys.executable, "-m", "venv", str(OV_VENV)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", f"openvino=={OV_VERSION}", "numpy"], check=True)
    return py


def run(py: Path, engine: str, threads: int, a, dump: Path) -> dict:
    sizes = json.dumps(SIZES[a.model])
    model = MODELS / f"{a.model}.onnx"
    p = subprocess.run([str(py), "-c", RUNNER, engine, str(model), str(threads), str(a.warmup), str(a.repeat), sizes, str(dump), a.precision],
                       capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{engine}: {p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def max_diffs(py: Path, a: Path, b: Path) -> dict:
    """The largest difference of the two engines' outputs, per size (numpy from the venv)."""
    code = "import json, sys, numpy as np; a, b = np.load(sys.argv[1]), np.load(sys.argv[2]); print(json.dumps({k: float(np.abs(a[k] - b[k]).max()) for k in a.files}))"
    p = subprocess.run([str(py), "-c", code, str(a), str(b)], capture_output=True, text=True, check=True)
    return json.loads(p.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--model", default="det", choices=["det", "rec"], help="the detector (default) or the recognizer")
    ap.add_argument("--precision", default="f32", help="OpenVINO's INFERENCE_PRECISION_HINT: f32 (the model's own; default) or bf16 (AMX/AVX-512 bf16, not the same output)")
    a = ap.parse_args()
    if not (MODELS / f"{a.model}.onnx").exists() or not ORT_PY.exists():
        sys.exit("run scripts/setup.sh first (models, data/venv-rapidocr)")
    ov_py = ensure_openvino()
    flags = next((l for l in open("/proc/cpuinfo") if l.startswith("flags")), "")
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    isa = [f for f in ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile") if f" {f}" in flags]
    print(f"cpu: {cpu}, {os.cpu_count()} threads, {' '.join(isa)}")
    tmp = REPO / "data/bench/ocr_engines"
    tmp.mkdir(parents=True, exist_ok=True)
    print(f"{a.model}: {'input':>12} {'threads':>7} {'ORT ms':>8} {'OpenVINO ms':>12} {'ORT/OV':>7} {'max |diff|':>10}")
    for threads in [int(t) for t in a.threads.split(",")]:
        res = {}
        for engine, py in [("ort", ORT_PY), ("ov", ov_py)]:
            res[engine] = run(py, engine, threads, a, tmp / f"{engine}-{threads}.npz")
        diffs = max_diffs(ov_py, tmp / f"ort-{threads}.npz", tmp / f"ov-{threads}.npz")
        for (n, h, w) in SIZES[a.model]:
            k = f"{n}x{w}x{h}"
            ms = {e: 1000 * statistics.median(res[e]["sizes"][k]) for e in res}
            diff = diffs[k]
            print(f"{k:>17} {threads:>7} {ms['ort']:8.1f} {ms['ov']:12.1f} {ms['ort'] / ms['ov']:7.2f} {diff:10.2e}")
    print(f"onnxruntime {res['ort']['version']}, openvino {res['ov']['version']} at {a.precision}; median of {a.repeat}, {a.warmup} warm-up runs")


if __name__ == "__main__":
    main()
