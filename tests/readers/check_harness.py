"""Runs a release's harness exports without the harnesses, as tests/harness.rs asks.

usage: check_harness.py RELEASE PREDICTIONS.csv

lmms-eval: imports harness/lmms_eval/utils.py as plain Python (no lmms-eval installed), reads
every task YAML (the `!function` tags resolved against utils.py), builds each task's documents
the way lmms-eval 0.7.3 does (`datasets.load_dataset("parquet", data_files=...)` from the
release folder, then `process_docs`), calls `doc_to_visual`, `doc_to_text` and `process_results`
on every document with the answer the predictions file gives (an empty one when it gives
none), and aggregates with the YAML's functions. The group's value is lmms-eval's
`aggregate_subtask_metrics` with `weight_by_size: false`: the plain mean of its subtasks'.

VLMEvalKit: reads the TSVs with pandas as `vlmeval/smp` `load()` does (`pd.read_csv(sep='\\t')`)
and checks them against the loader's rules (see tests/harness.rs).

Prints one JSON object.
"""

import base64
import csv
import json
import os
import sys
from pathlib import Path

import datasets
import pandas as pd

from lmms_yaml import load_utils, read_yaml

release = Path(sys.argv[1]).resolve()
preds_file = Path(sys.argv[2])
root = release / "harness" / "lmms_eval"

utils = load_utils(root)

answers = {}
with open(preds_file, newline="", encoding="utf-8") as f:
    for row in csv.DictReader(f):
        answers[(row["item_id"], int(row.get("rotation") or 0))] = row["prediction"]

configs = {}
for y in sorted(root.glob("*.yaml")):
    configs[y.stem] = read_yaml(y, utils)

out = {"tasks": {}, "docs": {}, "groups": {}, "prompts_with_letters": 0, "visuals": 0, "splits": {}}
old = os.getcwd()
os.chdir(release)  # the data files are relative to the release folder
try:
    for name, cfg in configs.items():
        if "group" in cfg:
            continue
        assert cfg["dataset_path"] == "parquet", cfg
        assert cfg["cluster_key"] == "video_id", cfg
        files = cfg["dataset_kwargs"]["data_files"]
        out["splits"][name] = {
            "files": files,
            **{k: cfg.get(k) for k in ("test_split", "validation_split", "fewshot_split", "training_split")},
        }
        ds = datasets.load_dataset("parquet", data_files=files)
        docs = cfg["process_docs"](ds[cfg["test_split"]])
        per_metric = {m["metric"]: [] for m in cfg["metric_list"]}
        kwargs = cfg["lmms_eval_specific_kwargs"]["default"]
        for doc in docs:
            visual = cfg["doc_to_visual"](doc)
            out["visuals"] += len(visual)
            for v in visual:
                assert Path(v).is_file(), v
            text = cfg["doc_to_text"](doc, kwargs)
            r = int(doc.get("rotation") or 0)
            shown = utils.rotated(list(doc["options"]), r)
            if all(f"{chr(65 + i)}. {o}" in text for i, o in enumerate(shown)) and doc["question"] in text:
                out["prompts_with_letters"] += 1
            res = cfg["process_results"](doc, [answers.get((doc["item_id"], r), "")])
            # lmms-eval reports every returned key as a metric of the task: exactly the list.
            assert set(res) == set(per_metric), (name, sorted(res))
            for m in per_metric:
                rec = res[m]
                assert rec["score"] in (0, 1) and rec["video_id"] == doc["video_id"], rec
                per_metric[m].append(rec)
        out["docs"][name] = len(docs)
        out["tasks"][name] = {
            m["metric"]: m["aggregation"](per_metric[m["metric"]]) for m in cfg["metric_list"]
        }
    for name, cfg in configs.items():
        if "group" not in cfg:
            continue
        agg = cfg["aggregate_metric_list"][0]
        assert agg["weight_by_size"] is False and agg["aggregation"] == "mean", agg
        vals = [out["tasks"][t][agg["metric"]] for t in cfg["task"] if agg["metric"] in out["tasks"][t]]
        out["groups"][name] = {"tasks": cfg["task"], agg["metric"]: sum(vals) / len(vals), "members": len(vals)}
finally:
    os.chdir(old)

# ---------------------------------------------------------------- VLMEvalKit
vdir = release / "harness" / "vlmevalkit"
q = datasets.load_dataset("parquet", data_files=sorted(str(p) for p in (release / "questions").glob("*.parquet")))["train"]
items = {r["item_id"]: r for r in q}
vlm = {}
for tsv in sorted(vdir.glob("*.tsv")):
    data = pd.read_csv(tsv, sep="\t")
    cols = list(data.columns)
    # build_dataset: a `question` column, A and B, and image or image_path: CustomMCQDataset.
    assert "question" in [c.lower() for c in cols] and "A" in data and "B" in data, cols
    assert "image" in data and "image_path" in data, cols
    # ImageBaseDataset: rows without an image are dropped; none may be.
    assert not data["image"].isna().any()
    idx = [int(x) for x in data["index"]]
    assert len(set(idx)) == len(idx), "index is unique"
    image_map = {str(i): str(im) for i, im in zip(idx, data["image"])}
    for k, im in image_map.items():
        if len(im) <= 64:
            # A short value is another row's index, and that row holds the images.
            assert im in image_map and len(image_map[im]) > 64, (k, im)
    checked, frames = 0, set()
    for _, row in data.iterrows():
        i = int(row["index"])
        im = image_map[str(i)]
        if len(im) <= 64:
            im = image_map[im]
        imgs = eval(im) if im.startswith("[") else [im]  # VLMEvalKit's toliststr
        paths = eval(row["image_path"]) if row["image_path"].startswith("[") else [row["image_path"]]
        assert len(imgs) == len(paths), (i, len(imgs), len(paths))
        frames.add(len(imgs))
        for b in imgs:
            assert base64.b64decode(b)[:2] == b"\xff\xd8", "a JPEG"
        # The original at index < 1e6; copy r at r * 1e6 + index, grouped by index % 1e6.
        it = items[row["item_id"]]
        r = int(row["rotation"])
        assert i // 1_000_000 == r, (i, r)
        n = len(it["options"])
        shown = [str(row[chr(65 + k)]) for k in range(n)]
        assert shown == utils.rotated(list(it["options"]), r), (shown, it["options"], r)
        assert shown[ord(row["answer"]) - 65] == it["options"][ord(it["answer"]) - 65]
        assert row["category"] == it["level"] and row["l2-category"] == it["split"]
        checked += 1
    groups = {}
    for i in idx:
        groups.setdefault(i % 1_000_000, []).append(i)
    vlm[tsv.name] = {
        "columns": cols,
        "rows": len(data),
        "checked": checked,
        "originals": sum(1 for i in idx if i < 1_000_000),
        "max_index": max(idx),
        "group_sizes": sorted({len(g) for g in groups.values()}),
        "frames_per_row": sorted(frames),
        "l2": sorted(set(data["l2-category"])),
    }
out["vlmevalkit"] = vlm
out["items"] = len(items)
print(json.dumps(out))
