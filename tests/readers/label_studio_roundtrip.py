"""Drives a real Label Studio through its HTTP API the way an annotation team would, for
tests/annotate.rs: creates a project with vidcurate's label_config.xml (Label Studio validates
it), imports tasks.json, submits annotations (valid ones, a cancelled one, one whose span ends
before it starts, a "yes" without a description), and writes the project's JSON export.
With --revise it changes one annotation and exports again.

Usage: label_studio_roundtrip.py BASE_URL TOKEN EXPORT_DIR OUT.json [--revise OUT2.json]
Prints one JSON line: the project id and the task ids by video.
"""
import json
import sys

from ls_api import client

base, token, export_dir, out = sys.argv[1:5]
revise = sys.argv[6] if len(sys.argv) > 6 and sys.argv[5] == "--revise" else None
call = client(base, token)

config = open(f"{export_dir}/label_config.xml").read()
project = call("POST", "/api/projects", {"title": "vidcurate round trip", "label_config": config})
pid = project["id"]
tasks = json.load(open(f"{export_dir}/tasks.json"))
call("POST", f"/api/projects/{pid}/import", tasks)
listed = call("GET", f"/api/tasks?project={pid}&page_size=1000")
listed = listed["tasks"] if isinstance(listed, dict) else listed
by_video = {t["data"]["video_id"]: t["id"] for t in listed}


def span(label, start, end):
    return {"from_name": "spans", "to_name": "video", "type": "timelinelabels",
            "value": {"ranges": [{"start": start, "end": end}], "timelinelabels": [label]}}


def text(name, t):
    return {"from_name": name, "to_name": "video", "type": "textarea", "value": {"text": [t]}}


def label(v):
    return {"from_name": "risk_label", "to_name": "video", "type": "choices", "value": {"choices": [v]}}


full_yes = [span("risk_signal", 31, 60), span("accident", 61, 75),
            text("risk_visual_indicators", "smoke near the door"),
            text("risk_signal_first", "smoke appears"), text("risk_signal_then", "people run"),
            text("risk_signal_afterwards", "the door bursts"),
            text("accident_description", "a fire"), label("yes")]
made = {}
made["demo000"] = call("POST", f"/api/tasks/{by_video['demo000']}/annotations", {"result": full_yes})["id"]
made["demo001"] = call("POST", f"/api/tasks/{by_video['demo001']}/annotations", {"result": [label("no")]})["id"]
call("POST", f"/api/tasks/{by_video['demo002']}/annotations", {"result": [], "was_cancelled": True})
call("POST", f"/api/tasks/{by_video['demo003']}/annotations",
     {"result": [span("risk_signal", 60, 30), text("risk_signal_first", "x"), label("yes")]})
call("POST", f"/api/tasks/{by_video['demo004']}/annotations", {"result": [label("yes")]})
json.dump(call("GET", f"/api/projects/{pid}/export?exportType=JSON"), open(out, "w"))
if revise:
    call("PATCH", f"/api/annotations/{made['demo001']}",
         {"result": [span("risk_signal", 1, 15), text("risk_signal_first", "a crack"), label("yes")]})
    json.dump(call("GET", f"/api/projects/{pid}/export?exportType=JSON"), open(revise, "w"))
print(json.dumps({"project": pid, "tasks": by_video}))
