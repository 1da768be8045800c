"""Drives a real Label Studio through its HTTP API as two people judging a model's answers the
way vidcurate's LLM judge does, for tests/evaluate_people.rs: creates the project with the
label_config.xml of `evaluate --people-out` (Label Studio validates it), imports its tasks.json,
creates the two people as users, posts their judgments and writes the project's JSON export.

The stand-in judge's rule (tests/evaluate_people.rs), replayed here to plant the judgments:
an element is stated (hit) when it shares a word (ASCII letters, any case) with the answer;
an element with "smoke" is never judged; completeness is the answer's word count, at most 5.

Taken in item-id order (tasks of task `rl` for hits, `ot` for completeness):
  hits     the first 4 units the judge calls hit, the first 4 it calls miss, the first smoke unit
           (unjudged): person a agrees with the judge on all 8 and says hit on the smoke unit;
           person b flips the first hit and the first miss and says miss on the smoke unit.
  ratings  the first answer the judge rates 1, 2, 3 and 4: a gives the judge's, b 2, 2, 3, 5.
On other tasks, judgments that must be named and kept out: a's hit_0 "maybe" and completeness
"7" (Label Studio checks choices against the config, so they are written into the export
afterwards, as an export of a project whose config was changed would carry them); a's hit_2 on
an item with fewer elements; a's judgment of a task whose item_id (then model) the export
changes to one that is not there; b's skipped (cancelled) annotation.

Usage: label_studio_judging.py BASE_URL TOKEN PROJECT_DIR OUT.json
Prints one JSON line: the two people's user ids, the units chosen, the counts to expect.
"""
import json
import re
import sys

from ls_api import client

base, token, project_dir, out = sys.argv[1:5]
call = client(base, token)

config = open(f"{project_dir}/label_config.xml").read()
pid = call("POST", "/api/projects", {"title": "judging", "label_config": config})["id"]
call("POST", f"/api/projects/{pid}/import", json.load(open(f"{project_dir}/tasks.json")))
listed = call("GET", f"/api/tasks?project={pid}&page_size=1000")
listed = listed["tasks"] if isinstance(listed, dict) else listed
tasks = sorted(listed, key=lambda t: t["data"]["item_id"])
users = {}
for who in ["a", "b"]:
    email = f"{who}@example.org"
    users[who] = call("POST", "/api/users/", {"email": email, "username": email,
                                              "first_name": who, "last_name": "Judge"})["id"]


def words(s):
    return set(re.findall("[a-z]+", s.lower()))


def judge_hit(element, answer):
    """None: unjudged."""
    if "smoke" in element.lower():
        return None
    return bool(words(element) & words(answer))


def judge_rating(answer):
    return min(len(answer.split()), 5)


# (task index, k) units by the judge's verdict.
hit, miss, unjudged = [], [], []
for i, t in enumerate(tasks):
    d = t["data"]
    if d["task"] != "rl":
        continue
    for k in range(d["elements_used"]):
        v = judge_hit(d[f"element_{k}"], d["answer"])
        (unjudged if v is None else hit if v else miss).append((i, k))
units = hit[:4] + miss[:4] + unjudged[:1]
assert len(units) == 9, (hit, miss, unjudged)
rated = {}
for i, t in enumerate(tasks):
    d = t["data"]
    r = judge_rating(d["answer"])
    if d["task"] == "ot" and r in (1, 2, 3, 4) and r not in rated:
        rated[r] = i
assert sorted(rated) == [1, 2, 3, 4], rated

a_says, b_says = {}, {}  # task index -> result list
for u in units:
    i, k = u
    truth = judge_hit(tasks[i]["data"][f"element_{k}"], tasks[i]["data"]["answer"])
    a = True if truth is None else truth
    b = False if truth is None else (not truth if u in (hit[0], miss[0]) else truth)
    for says, v in ((a_says, a), (b_says, b)):
        says.setdefault(i, []).append(("hit_%d" % k, "hit" if v else "miss"))
b_rating = {1: 2, 2: 2, 3: 3, 4: 5}
for r, i in rated.items():
    a_says.setdefault(i, []).append(("completeness", str(r)))
    b_says.setdefault(i, []).append(("completeness", str(b_rating[r])))

used = set(a_says) | set(b_says)
free_rl = [i for i, t in enumerate(tasks) if t["data"]["task"] == "rl" and i not in used]
free_ot = [i for i, t in enumerate(tasks) if t["data"]["task"] == "ot" and i not in used]
short = next(i for i in free_rl if tasks[i]["data"]["elements_used"] < 3)
free_rl.remove(short)
maybe, unknown_item, skipped = free_rl[:3]
seven, unknown_model = free_ot[:2]
a_says[maybe] = [("hit_0", "hit")]
a_says[short] = [("hit_2", "hit")]
a_says[unknown_item] = [("hit_0", "miss")]
a_says[seven] = [("completeness", "3")]
a_says[unknown_model] = [("completeness", "2")]


def post(i, who, results, cancelled=False):
    body = {"result": [{"from_name": name, "to_name": "answer", "type": "choices",
                        "value": {"choices": [v]}} for name, v in results],
            "completed_by": users[who]}
    if cancelled:
        body = {"result": [], "was_cancelled": True, "completed_by": users[who]}
    return call("POST", f"/api/tasks/{tasks[i]['id']}/annotations", body)["id"]


ids = {}
for who, says in (("a", a_says), ("b", b_says)):
    for i, results in sorted(says.items()):
        ids[(who, i)] = post(i, who, results)
post(skipped, "b", [], cancelled=True)

export = call("GET", f"/api/projects/{pid}/export?exportType=JSON")
for t in export:
    if t["id"] == tasks[unknown_item]["id"]:
        t["data"]["item_id"] = "v99:rl:0"
    if t["id"] == tasks[unknown_model]["id"]:
        t["data"]["model"] = "other-model"
    for a in t["annotations"]:
        for r in a["result"]:
            if a["id"] == ids[("a", maybe)]:
                r["value"]["choices"] = ["maybe"]
            if a["id"] == ids[("a", seven)]:
                r["value"]["choices"] = ["7"]
json.dump(export, open(out, "w"))
# Annotations read: every one posted but the cancelled one and those of the two tasks whose
# item or model is changed (kept out whole); judgments: the 9 + 4 units, twice; tasks: those
# annotated (Label Studio exports no other).
print(json.dumps({
    "a": users["a"], "b": users["b"],
    "annotations": len(ids) - 2, "judgments": 2 * (len(units) + len(rated)),
    "tasks": len(set(a_says) | set(b_says) | {skipped}),
    "task_ids": {name: tasks[i]["id"] for name, i in
                 (("maybe", maybe), ("short", short), ("unknown_item", unknown_item),
                  ("seven", seven), ("unknown_model", unknown_model), ("skipped", skipped))},
}))
