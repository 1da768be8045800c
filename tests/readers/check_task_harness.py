"""Runs a benchmark-task release's harness exports without the harnesses, for tests/harness.rs.

usage: check_task_harness.py RELEASE PREDICTIONS.jsonl ITEMS.jsonl

lmms-eval: imports harness/lmms_eval/utils.py as plain Python, reads every task YAML of the
release's benchmark tasks (those whose `process_results` is `process_results_task`; the
`!function` tags resolved against utils.py), builds each task's documents the way lmms-eval 0.7.3
does (`datasets.load_dataset("parquet", data_files=...)` from the release folder), calls
`doc_to_visual`, `doc_to_text`, `doc_to_target` and `process_results` on every document with
the prediction for its item (an empty answer where there is none: lmms-eval always has one),
and aggregates with the YAML's functions.

ITEMS.jsonl is `vidcurate evaluate --items-out`: each item's values, problem code and label as
vidcurate read its answer. Every item's values from the exported functions are compared with
them (a difference over 1e-12 is listed), so a parser that reads one answer differently shows.

Splits: for each task, the files each split of its `data_files` lists and the split keys
(`test_split`, `validation_split`, `fewshot_split`, `training_split`), as `splits`.

VLMEvalKit: each `<name>_<task>_<split>.tsv` read with pandas, its rows checked against the
task's rows, with the splits (`l2-category`) its rows are in.

Prints one JSON object.
"""

import json
import os
import sys
from pathlib import Path

import datasets
import pandas as pd

from lmms_yaml import load_utils, read_yaml

release = Path(sys.argv[1]).resolve()
root = release / "harness" / "lmms_eval"
utils = load_utils(root)

answers = {}
with open(sys.argv[2], encoding="utf-8") as f:
    for line in f:
        r = json.loads(line)
        answers[r["item_id"]] = r["prediction"]
theirs = {}
with open(sys.argv[3], encoding="utf-8") as f:
    for line in f:
        r = json.loads(line)
        theirs[r["item_id"]] = r

out = {"tasks": {}, "docs": 0, "items_differ": [], "visuals": 0, "options_shown": 0, "groups": {},
       "splits": {}}
os.chdir(release)  # the data files are relative to the release folder
for y in sorted(root.glob("*.yaml")):
    cfg = read_yaml(y, utils)
    if "group" in cfg:
        out["groups"][cfg["group"]] = cfg["task"]
        continue
    if cfg["process_results"] is not utils.process_results_task:
        continue
    assert cfg["cluster_key"] == "video_id" and cfg["score_key"] == "value", cfg
    # lmms-eval would strip <think> from the answers by default; a tagged task scores it.
    assert cfg["reasoning_tags"] == "none", cfg
    files = cfg["dataset_kwargs"]["data_files"]
    out["splits"][cfg["task"]] = {
        "files": files,
        **{k: cfg.get(k) for k in ("test_split", "validation_split", "fewshot_split", "training_split")},
    }
    ds = datasets.load_dataset("parquet", data_files=files)
    docs = ds[cfg["test_split"]]
    metrics = {m["metric"]: [] for m in cfg["metric_list"]}
    kwargs = cfg["lmms_eval_specific_kwargs"]["default"]
    for doc in docs:
        out["docs"] += 1
        visual = cfg["doc_to_visual"](doc)
        for v in visual:
            assert Path(v).is_file(), v
        out["visuals"] += len(visual)
        text = cfg["doc_to_text"](doc, kwargs)
        assert doc["question"] in text, text
        opts = doc.get("options") or []
        if opts and all(f". {o}" in text for o in opts):
            out["options_shown"] += 1
        assert isinstance(cfg["doc_to_target"](doc), str)
        res = cfg["process_results"](doc, [answers.get(doc["item_id"], "")])
        assert set(res) == set(metrics), (y.name, sorted(res), sorted(metrics))
        for m, rec in res.items():
            metrics[m].append(rec)
        # The item as vidcurate scored it.
        mine, label, problem = utils.task_item_values(doc, answers.get(doc["item_id"], ""))
        t = theirs[doc["item_id"]]
        for m, v in t["values"].items():
            if abs(mine[m] - v) > 1e-12:
                out["items_differ"].append([doc["item_id"], m, mine[m], v, answers.get(doc["item_id"])])
        if t["status"] == "unread" and problem != t["problem"]:
            out["items_differ"].append([doc["item_id"], "problem", problem, t["problem"]])
        if t.get("label") != label:
            out["items_differ"].append([doc["item_id"], "label", label, t.get("label")])
    out["tasks"][cfg["task"]] = {
        m["metric"]: m["aggregation"](metrics[m["metric"]]) for m in cfg["metric_list"]
    }
    out["tasks"][cfg["task"]]["_higher_is_better"] = {
        m["metric"]: m["higher_is_better"] for m in cfg["metric_list"]
    }

vlm = {}
for tsv in sorted((release / "harness" / "vlmevalkit").glob("*.tsv")):
    data = pd.read_csv(tsv, sep="\t")
    task = data["item_id"].iloc[0].split(":")[1]
    rows = {
        r["item_id"]: r
        for f in sorted((release / "tasks" / task).glob("*.parquet"))
        for r in pd.read_parquet(f).to_dict("records")
    }
    for _, row in data.iterrows():
        it = rows[row["item_id"]]
        n, r = len(it["options"]), int(row["rotation"])
        shown = [str(row[chr(65 + k)]) for k in range(n)]
        assert shown == [it["options"][(k + r) % n] for k in range(n)], (shown, r)
        assert shown[ord(row["answer"]) - 65] == it["options"][ord(it["answer"]) - 65]
        assert row["question"] == it["question"]
    vlm[tsv.name] = {"rows": len(data), "items": len(rows),
                     "splits": sorted({rows[i]["split"] for i in data["item_id"]}),
                     "l2": sorted(set(data["l2-category"]))}
out["vlmevalkit"] = vlm
print(json.dumps(out))
