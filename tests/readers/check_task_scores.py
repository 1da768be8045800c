"""An independent scorer for vidcurate's benchmark-task metrics (MVFNDB B.3), for tests/evaluate_tasks.rs.

  make OUT SEED [splits]
                  writes a generated task release into OUT (tasks/tasks.json, tasks/<task>/
                  train-00000-of-00001.parquet, data/train-00000-of-00001.parquet with a `label`
                  and two frames per video, the frames' JPEGs under frames/), OUT/predictions.jsonl with messy answers (letters inside prose,
                  full-width forms, refusals, missing tags, reversed ranges, missing items) and
                  OUT/expect.json: how each planted answer must be read (status, problem code).
                  With `splits`, videos v00-v08 are train, v09-v10 validation and v11-v14 test,
                  each split in its own files (`<split>-00000-of-00001.parquet`), the answers
                  still covering every split.
  variants OUT SEED  writes OUT/var_<name>.jsonl for three prompt variants (two models each,
                  `model` column) answering the release's tagged task `tg`, and OUT/planted.json
                  (variant → model → item → the label planted, null for an answer without tags).
  check_variants OUT [SPLIT]  recomputes OUT/variants.json (`vidcurate evaluate --variant … --json`):
                  accuracy and clustered standard errors, scikit-learn's Macro-F1, the paired
                  differences, and delete-one-video jackknife errors for Macro-F1.
  check_judged OUT [SPLIT]  replays the stand-in judge's rule (tests/evaluate_tasks.rs: an element is
                  stated when the answer holds its first word; elements with "smoke" are never
                  judged) over the answers as vidcurate read them, and compares OUT/judged.json's
                  hit rates, means and clustered standard errors (1e-9).
  check OUT [SPLIT]  reads OUT/items.jsonl and OUT/report.json (written by `vidcurate evaluate
                  --items-out --json`) and recomputes every item's values from the reference and
                  the answer as vidcurate read it, and every mean, clustered standard error and
                  Macro-F1, with numpy, scikit-learn and the rouge-score package; prints what
                  differs by more than 1e-9 (and exits 1), else one JSON line of counts.

SPLIT (default all): only the items whose row's `split` is SPLIT are scored; the counts say how
many items that is, how many the release has, and how many predictions answer other splits.

ROUGE-L: rouge-score's own tokenizer for English; for texts with CJK characters a tokenizer
that makes each CJK character a token (rouge-score's drops them), as vidcurate documents.
"""
import json
import math
import os
import random
import re
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from rouge_score import rouge_scorer
from sklearn.metrics import f1_score

WORDS = ("the man in a red coat walks past the burning car while a reporter speaks "
         "police close road smoke rises crowd gathers near station bridge flood water").split()
ZH = "视频中的人在街道上行走警察封锁道路烟雾升起"
LABELS = ["real", "fake"]

TASKS = [
    # name, category, format, metrics, options
    ("sc", "perception", "single_choice", ["accuracy"], 4),
    ("pos", "perception", "single_choice", ["accuracy"], 30),
    ("mc", "perception", "multiple_choice", ["accuracy", "jaccard"], 6),
    ("cnt", "perception", "count", ["abs_distance"], 0),
    ("tr", "perception", "time_ranges", ["mean_iou"], 0),
    ("rl", "perception", "reference_list", ["rouge_l", "hit_rate.elements"], 0),
    ("ot", "understanding", "open_text", ["rouge_l", "completeness"], 0),
    ("tg", "reasoning", "tagged_reasoning", ["accuracy", "macro_f1", "rouge_l"], 0),
]


def sentence(rng, n=None, zh=False):
    if zh:
        return "".join(rng.choice(ZH) for _ in range(n or rng.randint(3, 9)))
    ws = [rng.choice(WORDS) for _ in range(n or rng.randint(2, 9))]
    s = " ".join(ws)
    return rng.choice([s, s.capitalize() + ".", s.upper(), s.replace(" ", ", ", 1)])


def letter(i):
    return chr(ord("A") + i)


def write_frames(out, video):
    """Two small JPEG frames of a video, as a release with `--frames paths` holds them."""
    from PIL import Image

    paths = []
    for k in range(2):
        rel = f"frames/{video}/{k:05d}.jpg"
        os.makedirs(os.path.join(out, "frames", video), exist_ok=True)
        Image.new("RGB", (8, 8), (40 * k, 90, 200)).save(os.path.join(out, rel), "JPEG")
        paths.append(rel)
    return paths


def split_of_video(v, splits):
    """train, validation or test by the video's number when the release has splits."""
    if not splits:
        return "train"
    k = int(v[1:])
    return "train" if k < 9 else "validation" if k < 11 else "test"


def write_split_files(d, rows):
    """`rows` in one Parquet file per split, named as a release names them."""
    os.makedirs(d, exist_ok=True)
    for split in sorted({r["split"] for r in rows}):
        pq.write_table(pa.Table.from_pylist([r for r in rows if r["split"] == split]),
                       os.path.join(d, f"{split}-00000-of-00001.parquet"))


def task_rows(out, name, split="all"):
    """A task's released rows (every file of its folder) of SPLIT, by their `split` column."""
    d = os.path.join(out, "tasks", name)
    rows = [r for f in sorted(os.listdir(d)) if f.endswith(".parquet")
            for r in pq.read_table(os.path.join(d, f)).to_pylist()]
    return [r for r in rows if split in ("all", r["split"])]


def make(out, seed, splits=False):
    rng = random.Random(seed)
    videos = [f"v{i:02d}" for i in range(15)]
    labels = [rng.choice(LABELS) for _ in videos]
    frames = [write_frames(out, v) for v in videos]
    write_split_files(os.path.join(out, "data"),
                      [{"video_id": v, "split": split_of_video(v, splits), "label": l, "frames": f}
                       for v, l, f in zip(videos, labels, frames)])
    infos, preds, expect = [], [], {}
    for name, cat, fmt, metrics, nopt in TASKS:
        infos.append({"name": name, "stage": name, "title": name.upper(), "category": cat,
                      "targets": ["original_footage"], "format": fmt, "metrics": metrics,
                      "question": "q", "options": [], "labels": LABELS if fmt == "tagged_reasoning" else [],
                      "reference": "drafted", "fingerprint": "0" * 16})
        rows = []
        for k in range(40):
            v = rng.choice(videos)
            item = f"{v}:{name}:{k}"
            r = {"video_id": v, "split": split_of_video(v, splits), "item_id": item, "task": name,
                 "question": f"Question {k} of {name.upper()}?"}
            p = None
            if fmt in ("single_choice", "multiple_choice"):
                opts = [f"option {j} {rng.choice(WORDS)}" for j in range(nopt)]
                r["options"] = opts
            if fmt == "single_choice":
                a = rng.randrange(nopt)
                label = str(a + 1) if nopt > 26 else letter(a)
                r["answer"] = label
                guess = rng.randrange(nopt)
                g = str(guess + 1) if nopt > 26 else letter(guess)
                p = rng.choice([g, f"({g.lower()})", f"The answer is {g} because it fits.",
                                f"答案：{chr(0xFF21 + guess) if nopt <= 26 else g}", "I cannot tell.",
                                "I'm sorry, I can't help with that.", opts[guess], None])
            elif fmt == "multiple_choice":
                right = sorted(rng.sample(range(nopt), rng.randint(1, 3)))
                r["answer"] = ",".join(letter(i) for i in right)
                r["answer_choices"] = right
                chosen = sorted(rng.sample(range(nopt), rng.randint(1, 3)))
                p = rng.choice([", ".join(letter(i) for i in chosen),
                                "、".join(letter(i).lower() for i in chosen),
                                json.dumps([letter(i) for i in chosen]), "nobody is shown", None])
            elif fmt == "count":
                r["answer_count"] = rng.randint(0, 6)
                c = rng.randint(0, 7)
                p = rng.choice([str(c), f"{c} angles", chr(0xFF10 + c), "three", "-1", None])
            elif fmt == "time_ranges":
                n = rng.randint(1, 2)
                starts = sorted(round(rng.uniform(0, 20), 1) for _ in range(n))
                r["answer_starts"] = starts
                r["answer_ends"] = [s + round(rng.uniform(0.5, 6), 1) for s in starts]
                a, b = sorted(round(rng.uniform(0, 25), 1) for _ in range(2))
                b = max(b, a + 0.5)
                c, d = a + 1.0, b + 2.0
                p = rng.choice([json.dumps([[a, b]]), f"from {a} s to {b} s",
                                json.dumps([[a, b], [c, d]]), json.dumps([[b, a]]), "no idea", None])
            elif fmt == "reference_list":
                r["reference_fields"] = ["elements"]
                r["reference_items"] = [[sentence(rng, 3) for _ in range(rng.randint(1, 3))]]
                p = rng.choice([sentence(rng), sentence(rng, zh=True), "", None])
            elif fmt == "open_text":
                zh = rng.random() < 0.3
                r["answer_text"] = sentence(rng, zh=zh)
                p = rng.choice([sentence(rng, zh=zh), sentence(rng), "", None])
            elif fmt == "tagged_reasoning":
                r["answer_label"] = rng.choice(LABELS)
                r["answer_text"] = sentence(rng)
                r["reference_fields"] = ["entities"]
                r["reference_items"] = [[rng.choice(WORDS)]]
                lab = rng.choice(LABELS)
                think = sentence(rng)
                p = rng.choice([f"<think>{think}</think><result>{lab}</result>",
                                f"<THINK>{think}</THINK>\n<RESULT>{lab.upper()}</RESULT>",
                                f"<think>{think}</think> so it is {lab}", "<result>maybe</result>",
                                f"<result>{lab}</result>", None])
            rows.append(r)
            if p is not None:
                preds.append({"item_id": item, "prediction": p})
            # How the planted shapes must be read.
            if p is None:
                expect[item] = ["missing", ""]
            elif fmt == "single_choice" and p.startswith("答案"):
                expect[item] = ["read", ""]
            elif fmt == "single_choice" and p.startswith("I"):
                expect[item] = ["unread", "no_option"]
            elif fmt == "count" and p in ("three",):
                expect[item] = ["unread", "not_a_count"]
            elif fmt == "count" and p == "-1":
                expect[item] = ["unread", "negative_count"]
            elif fmt == "time_ranges" and p.startswith("[[") and json.loads(p)[0][0] > json.loads(p)[0][1]:
                expect[item] = ["unread", "range_reversed"]
            elif fmt == "tagged_reasoning" and "<result>" not in p.lower():
                expect[item] = ["unread", "missing_result_tag"]
            elif fmt == "tagged_reasoning" and "maybe" in p:
                expect[item] = ["unread", "unknown_label"]
            elif fmt == "multiple_choice" and p.startswith("nobody"):
                expect[item] = ["unread", "no_option"]
        write_split_files(os.path.join(out, "tasks", name), rows)
    with open(os.path.join(out, "tasks", "tasks.json"), "w") as f:
        json.dump(infos, f, indent=1)
    with open(os.path.join(out, "predictions.jsonl"), "w") as f:
        for p in preds:
            f.write(json.dumps(p, ensure_ascii=False) + "\n")
    with open(os.path.join(out, "expect.json"), "w") as f:
        json.dump(expect, f)


CJK = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]")


class CjkTokenizer:
    def tokenize(self, text):
        return re.findall("[a-z0-9]+|[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]",
                          text.lower())


def rouge(ref, pred):
    tok = CjkTokenizer() if CJK.search(ref + pred) else None
    return rouge_scorer.RougeScorer(["rougeL"], tokenizer=tok).score(ref, pred)["rougeL"].fmeasure


def union_length(ranges):
    """Measure of a union of intervals: endpoints sorted, covered pieces summed (numpy)."""
    if len(ranges) == 0:
        return 0.0
    pts = np.unique(np.array(ranges, dtype=float).ravel())
    mids = (pts[:-1] + pts[1:]) / 2
    r = np.array(ranges, dtype=float)
    covered = ((mids[:, None] >= r[None, :, 0]) & (mids[:, None] <= r[None, :, 1])).any(axis=1)
    return float(np.sum(np.diff(pts)[covered]))


def iou(p, r):
    inter_pieces = [[max(a, c), min(b, d)] for a, b in p for c, d in r if min(b, d) > max(a, c)]
    inter = union_length(inter_pieces)
    union = union_length(list(p) + list(r))
    return 0.0 if union <= 0 else inter / union


def clustered(values, videos):
    y = np.array(values, dtype=float)
    n = len(y)
    if n == 0:
        return 0.0, 0.0
    mean = y.mean()
    groups = {}
    for v, e in zip(videos, (y - mean) / n):
        groups[v] = groups.get(v, 0.0) + e
    g = len(groups)
    if g < 2:
        return mean, 0.0
    e = np.array(list(groups.values()))
    return mean, math.sqrt(g / (g - 1) * float(np.sum(e * e)))


def item_value(fmt, metric, ref, it):
    a = it["answer"]
    if metric == "accuracy" and fmt == "single_choice":
        if a is None:
            return 0.0
        lab = ref["answer"]
        right = int(lab) - 1 if lab.isdigit() else ord(lab) - ord("A")
        return float(a["choice"] == right)
    if fmt == "multiple_choice":
        chosen = set(a["choices"]) if a else set()
        right = set(ref["answer_choices"])
        if metric == "accuracy":
            return float(bool(chosen) and chosen == right)
        return len(chosen & right) / len(chosen | right) if chosen | right else 0.0
    if metric == "abs_distance":
        return float(abs((a["count"] if a else 0) - ref["answer_count"]))
    if metric == "mean_iou":
        r = list(zip(ref["answer_starts"], ref["answer_ends"]))
        return iou(a["ranges"], r) if a else 0.0
    if metric == "rouge_l":
        if fmt == "reference_list":
            reference = "\n".join(x for items in ref["reference_items"] for x in items)
            pred = a["text"] if a else ""
        elif fmt == "open_text":
            reference, pred = ref["answer_text"], (a["text"] if a else "")
        else:
            reference, pred = ref["answer_text"], (a["tagged"]["think"] if a else "")
        return rouge(reference, pred)
    if metric == "accuracy" and fmt == "tagged_reasoning":
        return float(bool(a) and a["tagged"]["result"] == ref["answer_label"])
    raise ValueError((fmt, metric))


def check(out, split="all"):
    infos = json.load(open(os.path.join(out, "tasks", "tasks.json")))
    items = [json.loads(l) for l in open(os.path.join(out, "items.jsonl"))]
    report = {t["task"]: t for t in json.load(open(os.path.join(out, "report.json")))["tasks"]}
    scored = {r["item_id"] for t in infos for r in task_rows(out, t["name"], split)}
    released = {r["item_id"] for t in infos for r in task_rows(out, t["name"])}
    expect = {k: v for k, v in json.load(open(os.path.join(out, "expect.json"))).items() if k in scored}
    by_id = {it["item_id"]: it for it in items}
    bad, n_values, n_means = [], 0, 0
    if set(by_id) != scored:
        bad.append(f"items scored: {len(by_id)}, of the split: {len(scored)}")
    for item, (status, problem) in expect.items():
        it = by_id[item]
        if it["status"] != status or (problem and it["problem"] != problem):
            bad.append(f"{item}: read as {it['status']} {it['problem']}, planted {status} {problem}")
    for t in infos:
        refs = task_rows(out, t["name"], split)
        rows = [(r, by_id[r["item_id"]]) for r in refs]
        rep = report[t["name"]]
        if rep["items"] != len(refs):
            bad.append(f"{t['name']}: vidcurate scored {rep['items']} items, the split has {len(refs)}")
        for m in rep["metrics"]:
            vals = []
            for r, it in rows:
                v = item_value(t["format"], m, r, it)
                n_values += 1
                if abs(v - it["values"][m]) > 1e-9:
                    bad.append(f"{r['item_id']} {m}: vidcurate {it['values'][m]}, here {v}")
                vals.append(v)
            mean, se = clustered(vals, [r["video_id"] for r, _ in rows])
            n_means += 1
            got = rep["metrics"][m]
            if abs(mean - got["mean"]) > 1e-9 or abs(se - got["se"]) > 1e-9:
                bad.append(f"{t['name']} {m}: vidcurate {got['mean']} ± {got['se']}, here {mean} ± {se}")
        if "macro_f1" in t["metrics"]:
            truth = [r["answer_label"] for r, _ in rows]
            pred = [it["label"] or "(none)" for _, it in rows]
            f = f1_score(truth, pred, labels=LABELS, average="macro", zero_division=0)
            n_means += 1
            if abs(f - rep["macro_f1"]) > 1e-9:
                bad.append(f"{t['name']} macro_f1: vidcurate {rep['macro_f1']}, here {f}")
    if bad:
        print("\n".join(bad))
        sys.exit(1)
    preds = [json.loads(l)["item_id"] for l in open(os.path.join(out, "predictions.jsonl"))]
    print(json.dumps({"values": n_values, "means": n_means, "planted": len(expect),
                      "items": len(scored), "release_items": len(released),
                      "other_predictions": sum(1 for p in preds if p not in scored)}))


def check_judged(out, split="all"):
    items = {json.loads(l)["item_id"]: json.loads(l) for l in open(os.path.join(out, "items.jsonl"))}
    report = {t["task"]: t for t in json.load(open(os.path.join(out, "judged.json")))["tasks"]}
    refs = task_rows(out, "rl", split)
    vals, videos, left_out = [], [], 0
    for r in refs:
        a = items[r["item_id"]]["answer"]
        if a is None:
            vals.append(0.0)
            videos.append(r["video_id"])
            continue
        text = a["text"].lower()
        hits = [e.split()[0].lower() in text for e in r["reference_items"][0] if "smoke" not in e.lower()]
        if not hits:
            left_out += 1
            continue
        vals.append(sum(hits) / len(hits))
        videos.append(r["video_id"])
    mean, se = clustered(vals, videos)
    got = report["rl"]["metrics"]["hit_rate.elements"]
    bad = []
    if abs(mean - got["mean"]) > 1e-9 or abs(se - got["se"]) > 1e-9 or got["n"] != len(vals):
        bad.append(f"rl hit_rate.elements: vidcurate {got}, here {mean} ± {se} over {len(vals)}")
    if report["rl"]["unjudged_items"].get("hit_rate.elements", 0) != left_out:
        bad.append(f"rl items left out: vidcurate {report['rl']['unjudged_items']}, here {left_out}")
    if bad:
        print("\n".join(bad))
        sys.exit(1)
    print(json.dumps({"items": len(vals), "left_out": left_out}))


VARIANTS = ["zero-shot", "mvfnd-cot", "all-mvfnd-cot"]


def make_variants(out, seed):
    rng = random.Random(seed)
    refs = task_rows(out, "tg")
    planted = {}
    for k, v in enumerate(VARIANTS):
        planted[v] = {}
        with open(os.path.join(out, f"var_{v}.jsonl"), "w") as f:
            for model in ["m-large", "m-small"]:
                planted[v][model] = {}
                for r in refs:
                    right = rng.random() < 0.5 + 0.15 * k
                    lab = r["answer_label"] if right else rng.choice(LABELS)
                    lab = None if rng.random() < 0.1 else lab
                    p = "it is hard to say" if lab is None else f"<think>{sentence(rng)}</think><result>{lab}</result>"
                    planted[v][model][r["item_id"]] = lab
                    f.write(json.dumps({"item_id": r["item_id"], "model": model, "prediction": p}) + "\n")
    with open(os.path.join(out, "planted.json"), "w") as f:
        json.dump(planted, f)


def jackknife(videos, stat):
    groups = sorted(set(videos))
    thetas = np.array([stat(np.array([v != g for v in videos])) for g in groups])
    g = len(groups)
    return math.sqrt((g - 1) / g * float(np.sum((thetas - thetas.mean()) ** 2))) if g > 1 else 0.0


def check_variants(out, split="all"):
    refs = task_rows(out, "tg", split)
    planted = json.load(open(os.path.join(out, "planted.json")))
    report = json.load(open(os.path.join(out, "variants.json")))
    truth = np.array([r["answer_label"] for r in refs])
    videos = [r["video_id"] for r in refs]

    def f1(pred, keep):
        return f1_score(truth[keep], pred[keep], labels=LABELS, average="macro", zero_division=0)

    bad, n = [], 0
    for row in report["rows"]:
        m, v = row["model"], row["variant"]
        pred = np.array([planted[v][m][r["item_id"]] or "(none)" for r in refs])
        acc = (pred == truth).astype(float)
        all_ = np.ones(len(refs), dtype=bool)
        mean, se = clustered(acc, videos)
        want = {"acc": mean, "acc_se": se, "f1": f1(pred, all_), "f1_se": jackknife(videos, lambda k: f1(pred, k))}
        got = {"acc": row["scores"]["accuracy"]["mean"], "acc_se": row["scores"]["accuracy"]["se"],
               "f1": row["scores"]["macro_f1"], "f1_se": row["scores"]["macro_f1_se"]}
        if row["difference"] is not None:
            base = np.array([planted[VARIANTS[0]][m][r["item_id"]] or "(none)" for r in refs])
            d = acc - (base == truth).astype(float)
            dm, dse = clustered(d, videos)
            want.update({"d_acc": dm, "d_acc_se": dse, "d_f1": f1(pred, all_) - f1(base, all_),
                         "d_f1_se": jackknife(videos, lambda k: f1(pred, k) - f1(base, k))})
            dd = row["difference"]
            got.update({"d_acc": dd["accuracy"]["mean"], "d_acc_se": dd["accuracy"]["se"],
                        "d_f1": dd["macro_f1"], "d_f1_se": dd["macro_f1_se"]})
        for k in want:
            n += 1
            if abs(want[k] - got[k]) > 1e-9:
                bad.append(f"{m} {v} {k}: vidcurate {got[k]}, here {want[k]}")
    if bad:
        print("\n".join(bad))
        sys.exit(1)
    print(json.dumps({"rows": len(report["rows"]), "numbers": n, "items": len(refs)}))


if __name__ == "__main__":
    cmd = sys.argv[1]
    split = sys.argv[3] if len(sys.argv) > 3 else "all"
    if cmd == "make":
        make(sys.argv[2], int(sys.argv[3]), sys.argv[4:] == ["splits"])
    elif cmd == "variants":
        make_variants(sys.argv[2], int(sys.argv[3]))
    elif cmd == "check_judged":
        check_judged(sys.argv[2], split)
    elif cmd == "check_variants":
        check_variants(sys.argv[2], split)
    else:
        check(sys.argv[2], split)
