"""Drives a real Label Studio through its HTTP API as a question-review team would, for
tests/annotate.rs (HarmVideoBench A.2: two reviewers, then a senior adjudicator on their
disagreements): creates the project with vidcurate's item label_config.xml (Label Studio
validates it), imports tasks.json, creates the two reviewers as users, submits their reviews
and the senior's, and writes the project's JSON export.

The items are taken in item-id order, i0 to i8, and reviewed so:
  i0 both accept                       -> accepted
  i1 both edit the question's wording  -> minor edit
  i2 both move it to another level     -> minor edit, reassigned
  i3 both reject                       -> rejected
  i4 r1 accepts, r2 rejects; the senior rewrites the question and the right option -> rewritten
  i5 r1 accepts, r2 edits; the senior accepts                                       -> accepted
  i6 r1 edits two options into the same text (two right answers: kept out); r2 accepts
  i7 r1 empties the question (kept out); r2 accepts
  i8 r1 moves it to a level the run does not have (kept out); r2 skips (cancelled) -> undecided
Label Studio checks a choice against the config, so the unknown level is written into the
export afterwards, as an export of a project whose config was changed would carry it.

Usage: label_studio_items.py BASE_URL TOKEN EXPORT_DIR OUT.json
Prints one JSON line: the item ids in order, the task ids by item, the users by email.
"""
import json
import sys

from ls_api import client

base, token, export_dir, out = sys.argv[1:5]
call = client(base, token)

config = open(f"{export_dir}/label_config.xml").read()
pid = call("POST", "/api/projects", {"title": "item review", "label_config": config})["id"]
call("POST", f"/api/projects/{pid}/import", json.load(open(f"{export_dir}/tasks.json")))
listed = call("GET", f"/api/tasks?project={pid}&page_size=1000")
listed = listed["tasks"] if isinstance(listed, dict) else listed
task = {t["data"]["item_id"]: t for t in listed}
ids = sorted(task)
assert len(ids) >= 9, ids
users = {}
for email in ["r1@example.org", "r2@example.org"]:
    users[email] = call("POST", "/api/users/", {"email": email, "username": email,
                                                "first_name": email[:2], "last_name": "Reviewer"})["id"]
senior = next(u["id"] for u in call("GET", "/api/users/") if u["email"] == "annotator@example.org")
users["annotator@example.org"] = senior


def fields(d, **change):
    """The item's fields as the reviewer leaves them: the drafted ones, then `change`."""
    f = {"question": d["question"], "answer": d["answer"], "level": d["level"]}
    for k in "abcdefgh":
        if f"option_{k}" in d:
            f[f"option_{k}"] = d[f"option_{k}"]
    f.update(change)
    return f


def result(decision, f, reason=""):
    r = [{"from_name": "decision", "to_name": "video", "type": "choices",
          "value": {"choices": [decision]}}]
    for k, v in f.items():
        if k in ("answer", "level"):
            r.append({"from_name": k, "to_name": "video", "type": "choices", "value": {"choices": [v]}})
        else:
            r.append({"from_name": k, "to_name": "video", "type": "textarea", "value": {"text": [v]}})
    if reason:
        r.append({"from_name": "reject_reason", "to_name": "video", "type": "textarea",
                  "value": {"text": [reason]}})
    return r


def review(i, who, decision, reason="", cancelled=False, **change):
    t = task[ids[i]]
    body = {"result": result(decision, fields(t["data"], **change), reason),
            "completed_by": users[who]}
    if cancelled:
        body = {"result": [], "was_cancelled": True, "completed_by": users[who]}
    return call("POST", f"/api/tasks/{t['id']}/annotations", body)["id"]


def other_level(d):
    return next(l for l in ["observable_evidence", "clip_internal_meaning", "beyond_clip_reasoning"]
                if l != d["level"])


r1, r2, sr = "r1@example.org", "r2@example.org", "annotator@example.org"
d = [task[i]["data"] for i in ids]
for who in (r1, r2):
    review(0, who, "accept")
    review(1, who, "edit", question=d[1]["question"].rstrip("?") + " here?")
    review(2, who, "edit", level=other_level(d[2]))
    review(3, who, "reject", reason="the question gives the answer away")
review(4, r1, "accept")
review(4, r2, "reject", reason="not answerable from the clip")
review(4, sr, "edit", question="Which object fills the frame for the whole clip?",
       option_a="A card of coloured stripes", option_b="A parked bicycle",
       option_c="A bowl of soup", option_d="An open book", answer="A")
review(5, r1, "accept")
review(5, r2, "edit", question="What is it?")
review(5, sr, "accept")
review(6, r1, "edit", option_b=d[6]["option_a"])
review(6, r2, "accept")
review(7, r1, "edit", question="")
review(7, r2, "accept")
bad = review(8, r1, "edit", level=other_level(d[8]))
review(8, r2, "accept", cancelled=True)

export = call("GET", f"/api/projects/{pid}/export?exportType=JSON")
for t in export:
    for a in t["annotations"]:
        if a["id"] == bad:
            for r in a["result"]:
                if r["from_name"] == "level":
                    r["value"]["choices"] = ["made_up_level"]
json.dump(export, open(out, "w"))
print(json.dumps({"ids": ids, "tasks": {i: task[i]["id"] for i in ids}, "users": users,
                  "drafted": d}))
