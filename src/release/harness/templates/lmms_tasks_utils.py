

# ================================================================ benchmark tasks
#
# The release's benchmark tasks (tasks/tasks.json), scored as `vidcurate evaluate` scores them:
# each answer read by its task's format (the same rules as vidcurate's parsers), then the metrics
# that need no judge. An answer the format cannot read is wrong and stays in the denominator
# (accuracy, Jaccard, IoU and ROUGE-L 0; a count read as 0; no label, never right). Means carry
# standard errors clustered by video (`clustered` above); Macro-F1 is over the task's labels.

import json as _json

# task -> its format, labels and the metrics scored here.
TASKS = _json.loads({{tasks}})

_MAX_LETTERED = 26


def _option_label(i, n):
    return str(i + 1) if n > _MAX_LETTERED else LETTERS[i % 26]


def task_doc_to_text(doc, lmms_eval_specific_kwargs=None):
    """The item's question, then its options (lettered; numbered past 26) for choice tasks."""
    kw = lmms_eval_specific_kwargs or {}
    lines = [kw.get("pre_prompt", "") + doc["question"]]
    options = list(doc.get("options") or [])
    if TASKS[doc["task"]]["format"] in ("single_choice", "multiple_choice"):
        lines += [f"{_option_label(i, len(options))}. {o}" for i, o in enumerate(options)]
    post = kw.get("post_prompt", "")
    if post:
        lines.append(post)
    return "\n".join(lines)


def task_doc_to_target(doc):
    """The reference as text (lmms-eval logs it; scoring reads the reference columns)."""
    fmt = TASKS[doc["task"]]["format"]
    if fmt == "single_choice":
        return doc["answer"]
    if fmt == "multiple_choice":
        return ",".join(LETTERS[i % 26] for i in doc["answer_choices"])
    if fmt == "count":
        return str(doc["answer_count"])
    if fmt == "time_ranges":
        return _json.dumps([[s, e] for s, e in zip(doc["answer_starts"], doc["answer_ends"])])
    if fmt == "tagged_reasoning":
        return doc["answer_label"]
    if fmt == "open_text":
        return doc["answer_text"]
    return "\n".join(x for items in doc["reference_items"] for x in items)


# ---------------------------------------------------------------- reading answers


class Unread(Exception):
    """An answer its format cannot read; `code` is vidcurate's problem code."""

    def __init__(self, code):
        super().__init__(code)
        self.code = code


def fold_width(s):
    """Full-width letters, digits and punctuation as their ASCII forms."""
    out = []
    for c in s:
        o = ord(c)
        if 0xFF01 <= o <= 0xFF5E:
            out.append(chr(o - 0xFEE0))
        else:
            out.append({"\u3000": " ", "、": ",", "【": "[", "】": "]"}.get(c, c))
    return "".join(out)


def _runs(text, keep):
    """The maximal runs of characters `keep` accepts, in order."""
    runs, cur = [], ""
    for c in text:
        if keep(c):
            cur += c
        elif cur:
            runs.append(cur)
            cur = ""
    if cur:
        runs.append(cur)
    return runs


def letters_in(text, n):
    """Option letters standing alone; inside prose only capitals (the article "a" is no option)."""
    words = _runs(text.strip(), str.isalnum)
    only_letters = all(len(w) == 1 for w in words)
    out = []
    for w in words:
        if len(w) != 1:
            continue
        c = w
        up = c.upper() if c.isascii() else c
        if not ("A" <= up <= "Z") or not (("A" <= c <= "Z") or only_letters):
            continue
        i = ord(up) - ord("A")
        if (only_letters or i < n) and i not in out:
            out.append(i)
    return out


def _option_text(text, options):
    def norm(s):
        return s.strip().rstrip(".").lower()

    t = norm(text)
    for i, o in enumerate(options):
        if norm(o) == t:
            return i
    return None


def _numbered(text, n):
    nums = [int(w) for w in _runs(text, lambda c: "0" <= c <= "9") if int(w) < 2**64]
    if not nums:
        raise Unread("no_option")
    if len(nums) > 1:
        raise Unread("several_options")
    if 1 <= nums[0] <= n:
        return nums[0] - 1
    raise Unread("not_an_option")


def _one_letter(text, options):
    i = _option_text(text, options)
    if i is not None:
        return i
    if len(options) > _MAX_LETTERED:
        return _numbered(text, len(options))
    found = letters_in(text, len(options))
    if not found:
        raise Unread("no_option")
    if len(found) > 1:
        raise Unread("several_options")
    if found[0] >= len(options):
        raise Unread("not_an_option")
    return found[0]


def _letters(text, options):
    found = letters_in(text, len(options))
    if any(i >= len(options) for i in found):
        raise Unread("not_an_option")
    found = sorted(set(found))
    if not found:
        raise Unread("no_option")
    return found


def _float(s):
    try:
        return float(s)
    except ValueError:
        return None


def _count(text):
    t = text.strip()
    start = next((k for k, c in enumerate(t) if ("0" <= c <= "9") or c == "-"), None)
    n = None
    if start is not None:
        tail = t[start:]
        end = next((k + 1 for k, c in enumerate(tail[1:]) if not (("0" <= c <= "9") or c == ".")), len(tail))
        n = _float(tail[:end])
    if n is None:
        raise Unread("not_a_count")
    if n < 0:
        raise Unread("negative_count")
    if n != int(n) or n > 4294967295:
        raise Unread("not_a_count")
    return int(n)


def _numbers_in(text):
    out, cur = [], ""
    for c in text + " ":
        if ("0" <= c <= "9") or (c == "." and cur and "." not in cur):
            cur += c
        else:
            x = _float(cur) if cur else None
            if x is not None:
                out.append(x)
            cur = ""
    return out


def _ranges(text):
    nums = _numbers_in(text)
    if not nums:
        raise Unread("no_range")
    if len(nums) % 2 or not all(math.isfinite(x) for x in nums):
        raise Unread("bad_range")
    out = [(nums[k], nums[k + 1]) for k in range(0, len(nums), 2)]
    for s, e in out:
        if e <= s:
            raise Unread("range_reversed")
    return out


def _ascii_lower(s):
    return "".join(c.lower() if "A" <= c <= "Z" else c for c in s)


def _between(text, open_tag, close_tag):
    lower = _ascii_lower(text)
    s = lower.find(open_tag)
    if s < 0:
        return None
    s += len(open_tag)
    e = lower.find(close_tag, s)
    return None if e < 0 else text[s:e]


def _tagged(text, labels):
    result = _between(text, "<result>", "</result>")
    if result is None:
        raise Unread("missing_result_tag")
    think = _between(text, "<think>", "</think>") or ""
    r = result.strip()
    for lab in labels:
        if _ascii_lower(lab) == _ascii_lower(r):
            return think.strip(), lab
    if not labels:
        return think.strip(), r
    raise Unread("unknown_label")


def read_answer(fmt, text, options, labels):
    """The answer as its format reads it; raises Unread with vidcurate's problem code."""
    text = fold_width(text if isinstance(text, str) else ("" if text is None else str(text)))
    if not text.strip():
        raise Unread("empty")
    if fmt == "single_choice":
        return _one_letter(text, options)
    if fmt == "multiple_choice":
        return _letters(text, options)
    if fmt == "count":
        return _count(text)
    if fmt == "time_ranges":
        return _ranges(text)
    if fmt in ("reference_list", "open_text"):
        return text.strip()
    return _tagged(text, labels)


# ---------------------------------------------------------------- per-item metrics


def _merged(ranges):
    out = []
    for s, e in sorted(((s, e) for s, e in ranges if e > s), key=lambda r: r[0]):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def union_iou(predicted, reference):
    """|union P & union R| / |union P | union R| (0 when both are empty)."""
    p, r = _merged(predicted), _merged(reference)
    inter = 0.0
    for ps, pe in p:
        for rs, re_ in r:
            inter += max(min(pe, re_) - max(ps, rs), 0.0)
    union = sum(e - s for s, e in p) + sum(e - s for s, e in r) - inter
    return 0.0 if union <= 0.0 else inter / union


def _cjk(c):
    o = ord(c)
    return (0x3040 <= o <= 0x30FF or 0x3400 <= o <= 0x4DBF or 0x4E00 <= o <= 0x9FFF
            or 0xF900 <= o <= 0xFAFF or 0xAC00 <= o <= 0xD7AF or 0x20000 <= o <= 0x2FA1F)


def rouge_tokens(text):
    """rouge-score's English tokens (lower case, runs of ASCII letters and digits); CJK one each."""
    out, word = [], ""
    for c in text.lower():
        if c.isascii() and c.isalnum():
            word += c
            continue
        if word:
            out.append(word)
            word = ""
        if _cjk(c):
            out.append(c)
    if word:
        out.append(word)
    return out


def rouge_l(reference, prediction):
    """ROUGE-L F-measure: the longest common subsequence of tokens."""
    r, p = rouge_tokens(reference), rouge_tokens(prediction)
    if not r or not p:
        return 0.0
    prev = [0] * (len(p) + 1)
    for a in r:
        cur = [0] * (len(p) + 1)
        for j, b in enumerate(p):
            cur[j + 1] = prev[j] + 1 if a == b else max(cur[j], prev[j + 1])
        prev = cur
    lcs = float(prev[len(p)])
    precision, recall = lcs / len(p), lcs / len(r)
    return 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)


def _right_choices(doc):
    if doc.get("answer_choices"):
        return sorted(set(doc["answer_choices"]))
    a = (doc.get("answer") or "").strip()
    if a.isdigit() and int(a) >= 1:
        return [int(a) - 1]
    return [ord(a[0].upper()) - ord("A")] if a else []


def task_item_values(doc, answer):
    """metric -> value for one item, the predicted label (tagged tasks) and the problem code."""
    task = TASKS[doc["task"]]
    fmt, labels = task["format"], task["labels"]
    options = list(doc.get("options") or [])
    try:
        read, problem = read_answer(fmt, answer, options, labels), ""
    except Unread as e:
        read, problem = None, e.code
    values, label = {}, None
    if fmt == "single_choice":
        values["accuracy"] = float(read is not None and _right_choices(doc) == [read])
    elif fmt == "multiple_choice":
        a, b = read or [], _right_choices(doc)
        inter = len(set(a) & set(b))
        union = len(a) + len(b) - inter
        values["accuracy"] = float(bool(a) and a == b)
        values["jaccard"] = 0.0 if union == 0 else inter / union
    elif fmt == "count":
        values["abs_distance"] = float(abs((read or 0) - int(doc.get("answer_count") or 0)))
    elif fmt == "time_ranges":
        reference = list(zip(doc.get("answer_starts") or [], doc.get("answer_ends") or []))
        values["mean_iou"] = 0.0 if read is None else union_iou(read, reference)
    elif fmt in ("reference_list", "open_text"):
        if fmt == "reference_list":
            # One list per reference field, in the fields' order.
            fields = doc.get("reference_fields") or []
            lists = (doc.get("reference_items") or [])[: len(fields)]
            ref = "\n".join(x for items in lists for x in (items or []) if x is not None)
        else:
            ref = doc.get("answer_text") or ""
        values["rouge_l"] = rouge_l(ref, read or "")
    else:
        think, label = read if read is not None else ("", None)
        values["accuracy"] = float(label is not None and label == (doc.get("answer_label") or ""))
        values["rouge_l"] = rouge_l(doc.get("answer_text") or "", think)
    return values, label, problem


def process_results_task(doc, results):
    """One record per metric the task's YAML lists (lmms-eval reports every returned key)."""
    answer = results[0] if results else ""
    values, label, problem = task_item_values(doc, answer)
    out = {}
    for m in TASKS[doc["task"]]["metrics"]:
        rec = {
            "metric": m,
            "task": doc["task"],
            "item_id": doc["item_id"],
            "video_id": doc["video_id"],
            "value": values.get(m, 0.0),
            "truth": doc.get("answer_label") or "",
            "label": label,
            "problem": problem,
        }
        out[m] = rec
        if m != "macro_f1":
            out[m + "_se"] = dict(rec)
    return out


# ---------------------------------------------------------------- task aggregation


def _task_values(items):
    return [(x["video_id"], None, float(x["value"])) for x in items]


def task_mean(items):
    return _mean_and_se(_task_values(items))[0]


def task_se(items):
    return _mean_and_se(_task_values(items))[1]


def task_macro_f1(items):
    """Macro-F1 over the task's labels; an answer without a label is wrong and no label's
    false positive; a label with no item and no prediction is left out of the average."""
    if not items:
        return 0.0
    labels = TASKS[items[0]["task"]]["labels"]
    f1s = []
    for lab in labels:
        tp = sum(1 for x in items if x["truth"] == lab and x["label"] == lab)
        fp = sum(1 for x in items if x["truth"] != lab and x["label"] == lab)
        fn = sum(1 for x in items if x["truth"] == lab and x["label"] != lab)
        if tp + fp + fn:
            f1s.append(2 * tp / (2 * tp + fp + fn))
    return sum(f1s) / len(f1s) if f1s else 0.0
