"""lmms-eval task functions for the vidcurate release `{{name}}`.

Written by `vidcurate release --harness lmms-eval`; plain Python (the standard library, plus
pyarrow and datasets, which lmms-eval brings). Scores equal `vidcurate evaluate` on the same
answers:

- an answer is read as `evaluate` reads it ("B", "(b)", "Answer: B", "答案：B", the option's own
  text); one that names no option, or several, counts as wrong and stays in the denominator;
- the headline is the macro average over levels; CircularEval counts an item only if every
  rotation of its options (letter i shows option (i + r) mod n) is answered right;
- standard errors are clustered by video: sqrt(G / (G - 1) * sum_g e_g^2), with e_g the
  video's summed influence (y - mean) / n, or (y - level mean) / (L * n_level) for the macro.
"""

import math
from pathlib import Path

# The release folder: this file sits in <release>/harness/lmms_eval/.
RELEASE = Path(__file__).resolve().parents[2]
# The levels in the release's order.
LEVELS = {{levels}}
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"

# ---------------------------------------------------------------- docs


def _only_level(dataset, level):
    return dataset.filter(lambda d: d["level"] == level)


def docs_all(dataset):
    return dataset


def docs_circular(dataset):
    """Every item once per rotation of its options (a `rotation` column)."""
    from datasets import Dataset

    rows = [dict(d, rotation=r) for d in dataset for r in range(len(d["options"]))]
    return Dataset.from_list(rows)


{{level_functions}}


# ---------------------------------------------------------------- prompt and visuals


def rotated(options, r):
    n = len(options)
    return [options[(i + r) % n] for i in range(n)]


def doc_to_text(doc, lmms_eval_specific_kwargs=None):
    kw = lmms_eval_specific_kwargs or {}
    shown = rotated(list(doc["options"]), int(doc.get("rotation") or 0))
    lines = [kw.get("pre_prompt", "") + doc["question"]]
    lines += [f"{LETTERS[i]}. {o}" for i, o in enumerate(shown)]
    post = kw.get("post_prompt", "Answer with the option's letter from the given choices directly.")
    if post:
        lines.append(post)
    return "\n".join(lines)


_FRAMES = None


def _frames():
    """video_id -> frame file paths (or PIL images, for a release made with --frames bytes)."""
    global _FRAMES
    if _FRAMES is None:
        import pyarrow.parquet as pq

        _FRAMES = {}
        for f in sorted((RELEASE / "data").glob("*.parquet")):
            t = pq.read_table(f)
            if "frames" not in t.column_names:
                continue
            for vid, frames in zip(t.column("video_id").to_pylist(), t.column("frames").to_pylist()):
                out = []
                for fr in frames or []:
                    if isinstance(fr, str):
                        out.append(str(RELEASE / fr))
                    elif isinstance(fr, dict) and fr.get("bytes") is not None:
                        import io

                        from PIL import Image

                        out.append(Image.open(io.BytesIO(fr["bytes"])).convert("RGB"))
                _FRAMES[vid] = out
    return _FRAMES


def doc_to_visual(doc):
    """The video's released frames, in order."""
    return _frames().get(doc["video_id"], [])


# ---------------------------------------------------------------- reading answers

_CUES = [
    "the correct answer is",
    "correct answer:",
    "the answer is",
    "answer is",
    "answer:",
    "option",
    "choice",
    "答案是",
    "答案为",
    "答案:",
    "答案",
    "选项",
    "选",
]
_FULL = {"：": ":", "（": "(", "）": ")", "。": ".", "，": ".", "、": "."}


def _ascii(c):
    if "Ａ" <= c <= "Ｚ":
        return chr(ord(c) - ord("Ａ") + ord("A"))
    if "ａ" <= c <= "ｚ":
        return chr(ord(c) - ord("ａ") + ord("a"))
    return _FULL.get(c, c)


def norm(s):
    """Lower-case letters and digits only."""
    return "".join(c.lower() for c in s if c.isalnum())


def _is_ascii_alpha(c):
    return ("a" <= c <= "z") or ("A" <= c <= "Z")


def _lower_ascii(s):
    return "".join(c.lower() if "A" <= c <= "Z" else c for c in s)


def parse_answer(text, options):
    """The index of the option `text` names; None when it names none or several."""
    t = "".join(_ascii(c) for c in (text or "")).strip()
    if not t:
        return None
    n = len(options)

    def letter(c):
        if not _is_ascii_alpha(c):
            return None
        i = ord(c.upper()) - ord("A")
        return i if i < n else None

    normed = [norm(o) for o in options]
    whole = norm(t.rstrip(".!"))
    for i, o in enumerate(normed):
        if o and o == whole:
            return i
    stripped = t.lstrip("([*\"' ")
    if stripped and letter(stripped[0]) is not None:
        first, rest = stripped[0], stripped[1:]
        if not rest or rest[0] in ")].:,*\"'":
            alone = True
        elif rest[0].isspace():
            word = ""
            for c in rest.lstrip():
                if not c.isalpha():
                    break
                word += c
            alone = ("A" <= first <= "Z") and (
                first != "A" or not word or word.lower() in ("because", "since", "as", "is", "it", "the")
            )
        else:
            alone = False
        if alone:
            return letter(first)
    lower = _lower_ascii(t)
    found = set()
    for cue in _CUES:
        start = 0
        while True:
            at = lower.find(cue, start)
            if at < 0:
                break
            after = t[at + len(cue):].lstrip(" :([*\"'")
            if after:
                i = letter(after[0])
                nxt = after[1:2]
                if i is not None and (not nxt or not (nxt.isascii() and nxt.isalnum())):
                    found.add(i)
            start = at + len(cue)
    if len(found) == 1:
        return found.pop()
    if len(found) > 1:
        return None
    hits = [i for i in range(n) if len(normed[i]) >= 3 and normed[i] in whole]
    return hits[0] if len(hits) == 1 else None


def score_doc(doc, results):
    """Right or not (0/1 `score`), and what the aggregations need."""
    answer = results[0] if results else ""
    options = list(doc["options"])
    n = len(options)
    r = int(doc.get("rotation") or 0)
    picked = parse_answer(answer if isinstance(answer, str) else str(answer), rotated(options, r))
    right_index = ord(doc["answer"]) - ord("A")
    return {
        "score": int(picked is not None and (picked + r) % n == right_index),
        "parsed": picked is not None,
        "item_id": doc["item_id"],
        "video_id": doc["video_id"],
        "level": doc["level"],
        "rotation": r,
        "options": n,
    }


# lmms-eval reports every key process_results returns as a metric of the task (an empty list
# when the task does not aggregate it), so each kind of task gets only its own.
LEVEL_METRICS = ["level_accuracy", "clustered_se"]
ALL_METRICS = ["macro_avg", "macro_se", "micro_avg", "micro_se"]
CIRCULAR_METRICS = ["circular_macro_avg", "circular_macro_se", "circular_micro_avg", "circular_micro_se"]


def process_results_level(doc, results):
    rec = score_doc(doc, results)
    return {k: dict(rec) for k in LEVEL_METRICS}


def process_results_all(doc, results):
    rec = score_doc(doc, results)
    return {k: dict(rec) for k in ALL_METRICS}


def process_results_circular(doc, results):
    rec = score_doc(doc, results)
    return {k: dict(rec) for k in CIRCULAR_METRICS}


# ---------------------------------------------------------------- aggregation


def clustered(weights):
    """sqrt(G / (G - 1) * sum_g (sum_{i in g} w_i)^2) over the groups; 0 with under 2 groups."""
    sums = {}
    for g, w in weights:
        sums[g] = sums.get(g, 0.0) + w
    big_g = len(sums)
    if big_g < 2:
        return 0.0
    ss = sum(sums[g] ** 2 for g in sorted(sums))
    return math.sqrt(big_g / (big_g - 1) * ss)


def _mean_and_se(rows):
    """rows: (video_id, level, y). The mean and its clustered standard error."""
    n = len(rows)
    if n == 0:
        return 0.0, 0.0
    mean = sum(y for _, _, y in rows) / n
    return mean, clustered([(v, (y - mean) / n) for v, _, y in rows])


def _macro(rows):
    """The mean of the level means (levels in the release's order) and its clustered error."""
    present = [lv for lv in LEVELS if any(r[1] == lv for r in rows)]
    present += sorted({r[1] for r in rows} - set(present))
    if not present:
        return 0.0, 0.0
    big_l = len(present)
    avg, influence = 0.0, []
    for lv in present:
        sub = [r for r in rows if r[1] == lv]
        m, _ = _mean_and_se(sub)
        avg += m / big_l
        influence += [(v, (y - m) / (big_l * len(sub))) for v, _, y in sub]
    return avg, clustered(influence)


def _plain(items):
    return [(x["video_id"], x["level"], float(x["score"])) for x in items]


def _circular(items):
    """One row per item: right only if every rotation 0..n-1 was answered right."""
    by_item = {}
    for x in items:
        by_item.setdefault(x["item_id"], []).append(x)
    rows = []
    for recs in by_item.values():
        right = {x["rotation"] for x in recs if x["score"]}
        y = float(all(r in right for r in range(recs[0]["options"])))
        rows.append((recs[0]["video_id"], recs[0]["level"], y))
    return rows


def mean_score(items):
    return _mean_and_se(_plain(items))[0]


def mean_se(items):
    return _mean_and_se(_plain(items))[1]


def macro_avg(items):
    return _macro(_plain(items))[0]


def macro_se(items):
    return _macro(_plain(items))[1]


def circular_macro_avg(items):
    return _macro(_circular(items))[0]


def circular_macro_se(items):
    return _macro(_circular(items))[1]


def circular_micro_avg(items):
    return _mean_and_se(_circular(items))[0]


def circular_micro_se(items):
    return _mean_and_se(_circular(items))[1]
