"""lmms-eval's results for an exported vidcurate group next to `vidcurate evaluate --json`.

usage: compare.py LMMS_OUTPUT_DIR EVALUATE.json GROUP   (exit 1 when a value differs by 1e-9)

A questions release compares the levels, the macro and micro averages and CircularEval; a
benchmark-task release (GROUP `<name>_tasks`) each task's scored metrics and Macro-F1.
"""
import json
import sys
from pathlib import Path

out_dir, ours_file, group = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
found = sorted(out_dir.rglob("*results*.json"))
if not found:
    sys.exit(f"{out_dir}: lmms-eval wrote no results file")
res = json.loads(found[-1].read_text())["results"]
ours = json.loads(ours_file.read_text())


def get(task, metric):
    return res.get(task, {}).get(f"{metric},none")


def ident(s):
    """The task-name form of a level, as `vidcurate release --harness` writes it."""
    out = ""
    for ch in s:
        if ch.isascii() and ch.isalnum():
            out += ch.lower()
        elif not out.endswith("_"):
            out += "_"
    return out.strip("_")


def task_rows():
    """A benchmark-task release: each task's metrics, standard errors and Macro-F1."""
    prefix = group[: -len("_tasks")]
    out = []
    for t in ours["tasks"]:
        task = f"{prefix}_{ident(t['task'])}"
        for m, v in t["metrics"].items():
            out.append((f"{t['task']}: {m}", get(task, m), v["mean"]))
            out.append((f"{t['task']}: {m} se (clustered)", get(task, f"{m}_se"), v["se"]))
        if t.get("macro_f1") is not None:
            out.append((f"{t['task']}: macro_f1", get(task, "macro_f1"), t["macro_f1"]))
    return out


rows = [] if "tasks" in ours else [(f"{group} (group) level_accuracy: macro", get(group, "level_accuracy"), ours["all"]["macro_avg"])]
for i, level in enumerate(ours.get("level_order", [])):
    task = f"{group}_{ident(level)}"
    if task not in res:
        task = f"{group}_level{i}"
    s = ours["all"]["levels"][level]
    rows.append((f"{level}: accuracy", get(task, "level_accuracy"), s["accuracy"]))
    rows.append((f"{level}: se (clustered)", get(task, "clustered_se"), s["se"]))
a, c = f"{group}_all", f"{group}_circular"
if "tasks" in ours:
    rows = task_rows()
else:
    rows += [
        ("macro average", get(a, "macro_avg"), ours["all"]["macro_avg"]),
        ("macro se (clustered)", get(a, "macro_se"), ours["all"]["macro_se"]),
        ("micro average", get(a, "micro_avg"), ours["all"]["micro"]["accuracy"]),
        ("micro se (clustered)", get(a, "micro_se"), ours["all"]["micro"]["se"]),
    ]
if ours.get("circular"):
    oc = ours["circular"]
    rows += [
        ("CircularEval macro", get(c, "circular_macro_avg"), oc["macro_avg"]),
        ("CircularEval macro se", get(c, "circular_macro_se"), oc["macro_se"]),
        ("CircularEval micro", get(c, "circular_micro_avg"), oc["micro"]["accuracy"]),
        ("CircularEval micro se", get(c, "circular_micro_se"), oc["micro"]["se"]),
    ]
bad = 0
print(f"{'':<40} {'lmms-eval':>12} {'evaluate':>12}")
for name, theirs, mine in rows:
    same = theirs is not None and abs(theirs - mine) < 1e-9
    bad += not same
    t = "missing" if theirs is None else f"{theirs:.6f}"
    print(f"{name:<40} {t:>12} {mine:>12.6f}  {'equal' if same else 'DIFFERENT'}")
lm = get(a, "micro_avg_stderr_clustered")
if lm is not None:
    print(f"(lmms-eval's own micro_avg_stderr_clustered, Miller's formula without G/(G-1): {lm})")
sys.exit(1 if bad else 0)
