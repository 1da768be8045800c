"""Drives a real Label Studio through its HTTP API as a review team would review benchmark task
items of every answer format, for tests/annotate_tasks.rs: for each task folder that
`vidcurate annotate export --task all` wrote, creates a project with its label_config.xml
(Label Studio validates it), imports its tasks.json, and has two reviewers and a senior review
the four items, taken in item-id order i0..i3:

  i0  r1 accepts, r2 accepts; the senior submits an invalid review (count, ranges, list tasks:
      a count of -1, a reversed range, every element deleted) -> kept out, accepted
  i1  r1 and r2 make the same edit E1                      -> E1
  i2  r1 accepts, r2 edits to E2; the senior edits to E2   -> E2 (the senior's)
  i3  r1 accepts, r2 rejects; the senior rejects           -> rejected

An accept sends the pre-annotation back as it is (what Label Studio's editor submits for an
untouched item). The edits per task (the clips are 25 fps; the timeline counts frames from 1):
  one     made B;           E1 C;                        E2 A
  many    made A,C;         E1 A,B,C;                    E2 B
  count   made 2;           E1 5;                        E2 3
  ranges  made [0.4,1.6];   E1 [0.4,1.2] (frames 11-30); E2 [1.0,1.8] (frames 26-45)
  list    made red car, man in blue; E1 adds "a dog";    E2 "a blue truck"
  open    made "a flood in the city"; E1 "a flood in the old city"; E2 "a parade downtown"
  tagged  made "red captions"; E1 "red captions and a logo"; E2 "calm footage", entities police

Usage: label_studio_tasks.py BASE_URL TOKEN EXPORT_DIR OUT_DIR
Writes OUT_DIR/<task>.json (each project's JSON export); prints one JSON line: the item ids in
order per task and the users by email.
"""
import json
import os
import sys

from ls_api import client

base, token, export_dir, out_dir = sys.argv[1:5]
call = client(base, token)
os.makedirs(out_dir, exist_ok=True)

users = {}
for email in ["r1@example.org", "r2@example.org"]:
    users[email] = call("POST", "/api/users/", {"email": email, "username": email,
                                                "first_name": email[:2], "last_name": "Reviewer"})["id"]
users["annotator@example.org"] = next(
    u["id"] for u in call("GET", "/api/users/") if u["email"] == "annotator@example.org")
r1, r2, sr = "r1@example.org", "r2@example.org", "annotator@example.org"


def choices(name, values):
    return {"from_name": name, "to_name": "video", "type": "choices", "value": {"choices": values}}


def text(name, values):
    return {"from_name": name, "to_name": "video", "type": "textarea", "value": {"text": values}}


def number(n):
    return {"from_name": "answer_count", "to_name": "video", "type": "number", "value": {"number": n}}


def frames(a, b):
    return {"id": f"r{a}", "from_name": "ranges", "to_name": "video", "type": "timelinelabels",
            "value": {"ranges": [{"start": a, "end": b}], "timelinelabels": ["reference"]}}


EDITS = {
    "one": ([choices("answer", ["C"])], [choices("answer", ["A"])], None),
    "many": ([choices("answer", ["A", "B", "C"])], [choices("answer", ["B"])], None),
    "count": ([number(5)], [number(3)], [number(-1)]),
    "ranges": ([frames(11, 30)], [frames(26, 45)], [frames(40, 11)]),
    "list": ([text("ref_elements", ["a red car", "a man in blue", "a dog"])],
             [text("ref_elements", ["a blue truck"])], [text("ref_elements", [""])]),
    "open": ([text("answer_text", ["a flood in the old city"])],
             [text("answer_text", ["a parade downtown"])], None),
    "tagged": ([text("answer_text", ["red captions and a logo"])],
               [text("answer_text", ["calm footage"]), text("ref_entities", ["the police"])], None),
}


def review(task, who, decision, edits=(), reason=""):
    """Posts one review: the pre-annotation with `edits` replacing its controls."""
    changed = {e["from_name"] for e in edits}
    result = [choices("decision", [decision])]
    if decision != "reject":
        result += [r for r in task["predictions"][0]["result"] if r["from_name"] not in changed]
        result += list(edits)
    else:
        result.append(text("reject_reason", [reason]))
    call("POST", f"/api/tasks/{task['id']}/annotations",
         {"result": result, "completed_by": users[who]})


ids = {}
for name, (e1, e2, invalid) in EDITS.items():
    folder = os.path.join(export_dir, name)
    config = open(os.path.join(folder, "label_config.xml")).read()
    pid = call("POST", "/api/projects", {"title": f"review {name}", "label_config": config})["id"]
    exported = json.load(open(os.path.join(folder, "tasks.json")))
    call("POST", f"/api/projects/{pid}/import", exported)
    listed = call("GET", f"/api/tasks?project={pid}&page_size=1000")
    listed = listed["tasks"] if isinstance(listed, dict) else listed
    pre = {t["data"]["item_id"]: t["predictions"] for t in exported}
    task = {t["data"]["item_id"]: dict(t, predictions=pre[t["data"]["item_id"]]) for t in listed}
    order = sorted(task)
    assert len(order) == 4, order
    ids[name] = order
    t = [task[i] for i in order]
    review(t[0], r1, "accept")
    review(t[0], r2, "accept")
    if invalid:
        review(t[0], sr, "edit", invalid)
    review(t[1], r1, "edit", e1)
    review(t[1], r2, "edit", e1)
    review(t[2], r1, "accept")
    review(t[2], r2, "edit", e2)
    review(t[2], sr, "edit", e2)
    review(t[3], r1, "accept")
    review(t[3], r2, "reject", reason="the reference is not in the clip")
    review(t[3], sr, "reject", reason="agreed: not in the clip")
    export = call("GET", f"/api/projects/{pid}/export?exportType=JSON")
    json.dump(export, open(os.path.join(out_dir, f"{name}.json"), "w"))

print(json.dumps({"ids": ids, "users": users}))
