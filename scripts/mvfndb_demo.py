#!/usr/bin/env python3
"""The shipped pipelines/mvfndb-benchmark.toml, run end to end offline, and its item table.

Nothing is changed in the pipeline but its three service base URLs, its source manifest and its
task paths (made absolute): probe -> 16 frames -> OCR -> shots -> MVFNDB's ten `items` stages,
then `vidcurate items RUN`. The corpus is scripts/make_demo_corpus.py's labelled fake/real
news-style clips with drawn captions, a rotated phone clip and a broken upload (rejected on
purpose: exit 3), made once in data/bench/mvfndb-<N>/.

CCP, CPP, KEG and SAC are derived from what vidcurate measured (no call). The six drafted tasks
call a STAND-IN, not a model: one local server on 127.0.0.1 that plays model A (`drafter`,
OpenAI-compatible), model B (`refiner`, Gemini generateContent) and the judge (`judge`,
OpenAI-compatible), answering in the recorded structured-output bodies
(tests/fixtures/llm/openai/, tests/fixtures/llm/gemini/) with its own text swapped in. Its
answers are made from the prompt (KEP elements from the title's words, DCS the title caption as
creator-added, HIR and NTU letters from the options, NEU a theme from the title, FDR reasoning
that ends in the prompt's verified label), and it walks the loop of MVFNDB's Figure 4 the way
the paper describes, decided by a hash of the title and task (so the same on every run):

- about a quarter of first drafts break their format once (an empty list, no letter that is
  an option, an FDR result that is not the verified label) and are fixed by the repair;
- model B hands back the draft it was given with a small edit (and, when the judge gave
  reasons, a revision that answers them);
- the judge gives 3 to about a third of first refinements, then 4 to the refinement made with
  its reasons; 2 for ever to about one item in fifteen (rejected: judged_below); 4 or 5 to the
  rest.

So the table shows what the stages and the loop do over a few videos, not how good any model's
items are.

With --release DIR it goes on to the scores: `split --stratify label`, `release` (one config
per task), `evaluate` of a STAND-IN answerer (not a model: the first option, one angle, the
first ten seconds, the question's own words, "fake" with its tags) in Table 1's shape by label,
its judged metrics by a STAND-IN judge on the same server (an element is stated when the answer
holds its first word; ratings from the share of the reference's words; two samples),
and `evaluate --variant` over FDR's five prompt variants answered by STAND-INs that are right
with a set chance per variant and sometimes forget the tags (they read the reference: a
simulation of Table 4's shape, not a result). The judged metrics print as `judge`.

Usage: scripts/mvfndb_demo.py [--videos N] [--bin PATH] [--keep DIR] [--release DIR]
"""
import argparse
import collections
import csv
import hashlib
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import pyarrow.dataset as ds

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BIN = os.path.join(ROOT, "target", "release", "vidcurate")
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "llm")
OPENAI = os.path.join(FIXTURES, "openai", "chat_completion_json_schema.json")
GEMINI = os.path.join(FIXTURES, "gemini", "generate_content_json_schema.json")
TALK = ("lecture", "panel", "tutorial")
LABELS = {}  # title -> the manifest's label (when one title has one label)


def decide(title, task):
    """(judge class, breaks its first draft) for one item, from a hash of its title and task."""
    h = int(hashlib.sha1(f"{task}|{title}".encode()).hexdigest(), 16)
    judge = "hopeless" if h % 15 == 0 else "steady" if h % 15 <= 5 else ("good", "best")[(h >> 8) % 2]
    return judge, (h >> 16) % 4 == 0


def chunks(title):
    """The title cut into short phrases at its small words: the stand-in's "elements"."""
    parts = re.split(r"[:,]|\b(?:at|near|and|on|during|as|from|outside|in|of|to|with|by|after)\b", title)
    return [p.strip().lower() for p in parts if len(p.strip()) > 2] or [title.lower()]


def options(prompt):
    return re.findall(r"^([A-Z]+)\. (.*)$", prompt, re.M)


def draft(task, title, prompt, broken):
    """Model A's first draft (`broken`: one that breaks the format, for the repair to fix)."""
    label = (re.search(r"Its verified label: (\w+)", prompt) or [None, LABELS.get(title, "real")])[1]
    label = label if label in ("real", "fake") else "real"
    talk = any(w in title.lower() for w in TALK)
    els = chunks(title)
    if task == "kep":
        return {"elements": [] if broken else els, "rationale": "Each element is named in the title and seen in the frames."}
    if task == "dcs":
        return {"creator_added": [] if broken else [f'caption "{title}"', "background tone"],
                "original_footage": els, "rationale": "The caption is drawn over the footage; the rest was filmed."}
    if task == "hir":
        want = ["expert"] if talk else ["journalist", "official"] if label == "real" else ["we-media creator", "member of the public"]
        letters = [k for k, o in options(prompt) if o in want]
        return {"answer": [] if broken else letters, "rationale": f"Seen on screen: {', '.join(want)}."}
    if task == "ntu":
        kind = "knowledge" if talk and "panel" not in title.lower() else "focal_np" if talk else "event_hp"
        letter = next((k for k, o in options(prompt) if o.startswith(kind + ":")), "A")
        return {"answer": "Z" if broken else letter, "rationale": f"Category {kind}: {title}."}
    if task == "neu":
        return {"theme": "" if broken else f"The video is about {title.lower()}. It shows {', '.join(els)}.",
                "rationale": "The theme follows the title and what the frames show."}
    if task == "fdr":
        result = ({"real": "fake", "fake": "real"}[label]) if broken else label
        why = ("sensational captions and no source" if label == "fake" else "a sober caption and a named place")
        return {"entities": els, "knowledge": ["News footage names its place and time",
                                                "Sensational overlays are common in fabricated clips"],
                "rationales": [f"The video shows {els[0]}", f"It carries {why}", f"So the news is {label}"],
                "answer": f"<think>The video shows {els[0]} with {why}.</think><result>{result}</result>",
                "rationale": f"The steps lead to {label}."}
    raise ValueError(task)


def task_of(fields, listed):
    """The task of a reference from its fields (Gemini's schema carries no name); `listed`: its
    answer is a list (HIR's letters, not NTU's one)."""
    for key, task in (("elements", "kep"), ("creator_added", "dcs"), ("entities", "fdr"), ("theme", "neu")):
        if key in fields:
            return task
    return "hir" if listed else "ntu"


def judge(prompt):
    ref = re.search(r"^Reference answer: (.*)$", prompt, re.M)
    title = re.search(r"title: (.*?); speech:", prompt)
    v = json.loads(ref.group(1)) if ref else {}
    kind, _ = decide(title.group(1) if title else "", task_of(v, isinstance(v.get("answer"), list)))
    revised = "Revised for the judge" in json.dumps(v)
    fc = {"hopeless": 2, "steady": 4 if revised else 3, "good": 4, "best": 5}[kind]
    why = {2: "it states events the frames do not show", 3: "one element is not visible in the frames",
           4: "what it states is shown or in the title", 5: "everything it states is shown or said"}[fc]
    return {"factual_consistency": fc, "factual_reason": why,
            "logical_rationality": 4 if fc < 5 else 5, "logical_reason": "the steps follow from the evidence"}


def score_judgment(schema, prompt, v):
    """The STAND-IN judge of `evaluate --judge` (not a model): an element is stated when the
    answer holds its first word; each rating is 5 times the share of the reference's words the
    answer holds, rounded."""
    answer = prompt.split("The answer:\n", 1)[-1].lower()
    if schema == "element_hit":
        element = re.search(r"^Reference element: (.*)$", prompt, re.M).group(1).lower()
        first = (element.split() or [""])[0]
        return {"hit": bool(first) and first in answer, "reason": "stand-in: first word"}
    ref = prompt.split("The reference:\n", 1)[-1].split("\n\nThe answer:", 1)[0].lower()
    words = set(re.findall(r"[a-z0-9]+", ref))
    share = len(words & set(re.findall(r"[a-z0-9]+", answer))) / len(words) if words else 0.0
    out = {k: round(5 * share) for k in v["response_format"]["json_schema"]["schema"]["properties"] if k != "reason"}
    out["reason"] = "stand-in: shared words"
    return out


def refine(prompt):
    """Model B: the draft it was given, with a small edit (and the judge's reasons answered)."""
    m = re.search(r"^Draft: (.*)$", prompt, re.M)
    v = json.loads(m.group(1))
    reasons = re.search(r"^Judge's reasons \(empty on the first round\): (.+)$", prompt, re.M)
    if not v.get("rationale", "").endswith("."):
        v["rationale"] = v.get("rationale", "") + "."
    if "Checked against the frames." not in v["rationale"]:
        v["rationale"] += " Checked against the frames."
    if reasons:
        v["rationale"] += f" Revised for the judge ({reasons.group(1).split(':')[0]})."
    return v


class StandIn(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    calls = collections.Counter()  # (service, schema) -> requests
    repairs = collections.Counter()  # service -> repair requests
    lock = threading.Lock()

    def do_POST(self):
        v = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        service = self.path.strip("/").split("/")[0]
        if service == "refiner":  # Gemini: /refiner/v1beta/models/<model>:generateContent
            prompt = v["contents"][0]["parts"][0]["text"]
            props = v["generationConfig"]["responseJsonSchema"]["properties"]
            schema = f"{task_of(props, props.get('answer', {}).get('type') == 'array')}_reference"
        else:
            c = v["messages"][0]["content"]
            prompt = c if isinstance(c, str) else " ".join(p.get("text", "") for p in c if isinstance(p, dict))
            schema = v["response_format"]["json_schema"]["name"]
        repair = "previous answer was invalid" in prompt
        with StandIn.lock:
            StandIn.calls[(service, schema)] += 1
            StandIn.repairs[service] += repair
        if service == "refiner":
            out = refine(prompt)
        elif service == "scorer":
            out = score_judgment(schema, prompt, v)
        elif schema == "item_judgment":
            out = judge(prompt)
        else:
            task = schema.removesuffix("_reference")
            title = re.search(r"Its title: (.*)$", prompt, re.M).group(1)
            out = draft(task, title, prompt, decide(title, task)[1] and not repair)
        with open(GEMINI if service == "refiner" else OPENAI) as f:
            body = json.load(f)
        if service == "refiner":
            body["candidates"][0]["content"]["parts"][0]["text"] = json.dumps(out)
        else:
            body["choices"][0]["message"]["content"] = json.dumps(out)
        b = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)

    def log_message(self, *a):
        pass


def pipeline(url, manifest):
    """The shipped pipeline with the three base URLs, the manifest and the task paths replaced."""
    with open(os.path.join(ROOT, "pipelines", "mvfndb-benchmark.toml")) as f:
        text = f.read()
    bases = {"drafter": f"{url}drafter/v1/", "refiner": f"{url}refiner/v1beta/", "judge": f"{url}judge/v1/"}
    text, n = re.subn(r'(\[services\.(\w+)\]\nbase_url = )"[^"]*"',
                      lambda m: f'{m.group(1)}"{bases[m.group(2)]}"', text)
    text, k = re.subn(r'manifest = "[^"]*"', f"manifest = {json.dumps(manifest)}", text)
    text, t = re.subn(r'task = "(tasks/[^"]*)"',
                      lambda m: f"task = {json.dumps(os.path.join(ROOT, 'pipelines', m.group(1)))}", text)
    if (n, k, t) != (3, 1, 10):
        sys.exit(f"pipelines/mvfndb-benchmark.toml changed shape: {n} base URLs, {k} manifests, {t} tasks replaced")
    return text


def first_option(t, r):
    """The STAND-IN answerer's answer to one item of task info `t` (no model; no reference)."""
    fmt = t["format"]
    if fmt == "single_choice":
        return "1" if len(r["options"]) > 26 else "A"
    if fmt == "multiple_choice":
        return "A"
    if fmt == "count":
        return "1"
    if fmt == "time_ranges":
        return "[[0, 10]]"
    if fmt == "tagged_reasoning":
        return "<think>The overlaid caption asserts more than the footage shows.</think><result>fake</result>"
    return r["question"]


VARIANTS = [("zero-shot", 0.55, 0.25), ("mvfnd-cot", 0.65, 0.1), ("cac-mvfnd-cot", 0.75, 0.05),
            ("osf-mvfnd-cot", 0.7, 0.05), ("all-mvfnd-cot", 0.8, 0.05)]


def variant_answer(variant, right_p, untagged_p, r, labels):
    """A STAND-IN for one prompt variant: right with chance right_p, no tags with chance
    untagged_p, decided by a hash of variant and item (the same on every run)."""
    h = int(hashlib.sha256(f"{variant}|{r['item_id']}".encode()).hexdigest(), 16)
    if (h % 1000) / 1000 < untagged_p:
        return "The video looks staged to me."
    right = ((h // 1000) % 1000) / 1000 < right_p
    label = r["answer_label"] if right else next(l for l in labels if l != r["answer_label"])
    return f"<think>Step by step: the claim, its consistency, the footage.</think><result>{label}</result>"


def score(bin_, run, release, tmp, url):
    """split -> release -> evaluate a stand-in answerer by label, judged by a stand-in judge ->
    the prompt variants."""
    env = dict(os.environ, OPENAI_API_KEY="sk-stand-in")

    def vc(*args):
        r = subprocess.run([bin_, *args], capture_output=True, text=True, env=env)
        if r.returncode != 0:
            sys.stderr.write(r.stderr)
            sys.exit(f"vidcurate {args[0]} exited {r.returncode}")
        return r.stdout
    vc("split", run, "--stratify", "label")
    shutil.rmtree(release, ignore_errors=True)
    print(vc("release", run, "--out", release, "--frames", "none").strip())
    tasks = json.load(open(os.path.join(release, "tasks", "tasks.json")))
    rows = {t["name"]: ds.dataset(os.path.join(release, "tasks", t["name"])).to_table().to_pylist() for t in tasks}
    preds = os.path.join(tmp, "first-option.jsonl")
    with open(preds, "w") as f:
        for t in tasks:
            for r in rows[t["name"]]:
                f.write(json.dumps({"item_id": r["item_id"], "prediction": first_option(t, r)}, ensure_ascii=False) + "\n")
    rel = os.path.relpath(release, ROOT)
    judge = os.path.join(tmp, "judge.toml")
    with open(judge, "w") as f:
        f.write(f'[services.scorer]\nbase_url = "{url}scorer/v1/"\napi_key_env = "OPENAI_API_KEY"\n'
                'requests_per_minute = 3000\n\n[judge]\nservice = "scorer"\nmodel = "stand-in-judge"\nsamples = 2\n')
    cache = os.path.join(tmp, "judge-cache.sqlite")
    print(f"\n$ vidcurate evaluate {rel} first-option.jsonl --by label --judge judge.toml   "
          "# STAND-IN answerer and STAND-IN judge (not models)")
    print(vc("evaluate", release, preds, "--by", "label", "--judge", judge, "--judge-cache", cache), end="")
    fdr = [t for t in tasks if t["format"] == "tagged_reasoning"]
    if not fdr:
        return
    args = []
    for name, right_p, untagged_p in VARIANTS:
        p = os.path.join(tmp, f"fdr-{name}.jsonl")
        with open(p, "w") as f:
            for t in fdr:
                for r in rows[t["name"]]:
                    f.write(json.dumps({"item_id": r["item_id"], "model": "stand-in",
                                        "prediction": variant_answer(name, right_p, untagged_p, r, t["labels"])}) + "\n")
        args += ["--variant", f"{name}={p}"]
    print(f"\n$ vidcurate evaluate {rel} " + " ".join(f"--variant {n}=fdr-{n}.jsonl" for n, _, _ in VARIANTS)
          + "   # STAND-INs right with a set chance per variant (a simulation of Table 4's shape)")
    print(vc("evaluate", release, *args), end="")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--videos", type=int, default=12)
    ap.add_argument("--bin", default=BIN)
    ap.add_argument("--keep", help="write the run directory here (default: a temporary folder)")
    ap.add_argument("--release", help="then split, release into this folder and score stand-in answerers")
    a = ap.parse_args()
    corpus = os.path.join(ROOT, "data", "bench", f"mvfndb-{a.videos}")
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "make_demo_corpus.py"), corpus,
                    "--clips", str(a.videos)], check=True)
    manifest = os.path.join(corpus, "manifest.csv")
    seen = collections.defaultdict(set)
    for r in csv.DictReader(open(manifest)):
        seen[r["title"]].add(r["label"])
    LABELS.update({t: ls.pop() for t, ls in seen.items() if len(ls) == 1})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    tmp = tempfile.mkdtemp(prefix="vc-mvfndb-")
    try:
        p = os.path.join(tmp, "mvfndb-benchmark.toml")
        with open(p, "w") as f:
            f.write(pipeline(f"http://127.0.0.1:{server.server_port}/", manifest))
        run = os.path.abspath(a.keep) if a.keep else os.path.join(tmp, "run")
        if a.keep:
            shutil.rmtree(run, ignore_errors=True)
        env = dict(os.environ, OPENAI_API_KEY="sk-stand-in", GEMINI_API_KEY="stand-in")
        t0 = time.perf_counter()
        r = subprocess.run([a.bin, "run", p, "--out", run], env=env, capture_output=True, text=True)
        secs = time.perf_counter() - t0
        if r.returncode not in (0, 3):
            sys.stderr.write(r.stderr)
            sys.exit(f"vidcurate run exited {r.returncode}")
        print(f"{a.videos} clips (+ a rotated phone clip and a broken upload), pipelines/mvfndb-benchmark.toml "
              f"against the STAND-IN server (not a model): {secs:.1f} s, exit {r.returncode}")
        rejects = os.path.join(run, "rejects")
        if os.path.isdir(rejects):
            for x in ds.dataset(rejects).to_table(columns=["video_id", "stage", "reason"]).to_pylist():
                print(f"  rejected {x['video_id']} at {x['stage']}: {x['reason']}")
        print("calls to the stand-in (service: schema requests):")
        for service in ("drafter", "refiner", "judge"):
            mine = sorted((s, n) for (sv, s), n in StandIn.calls.items() if sv == service)
            print(f"  {service:8} {sum(n for _, n in mine):4d}  " + ", ".join(f"{s} {n}" for s, n in mine)
                  + f"; repairs {StandIn.repairs[service]}")
        table_csv = os.path.join(tmp, "items.csv")
        t = subprocess.run([a.bin, "items", run, "--csv", table_csv], capture_output=True, text=True)
        if t.returncode != 0:
            sys.stderr.write(t.stderr)
            sys.exit(f"vidcurate items exited {t.returncode}")
        drafted = [x["stage"] for x in csv.DictReader(open(table_csv)) if x["origin"] == "drafted"]
        judged = sum(f is not None for st in drafted for r in ds.dataset(os.path.join(run, st)).to_table(
            columns=["round_factual"]).column("round_factual").to_pylist() for f in r)
        asked = sum(n for (sv, _), n in StandIn.calls.items() if sv == "judge")
        print(f"  judgments stored {judged}, judge calls {asked}: the judge sees no frames, so clips of one title "
              "with one reference text ask the same request, answered by the run's response cache")
        print(f"\n$ vidcurate items {os.path.relpath(run, ROOT) if a.keep else 'RUN'}")
        print(t.stdout, end="")
        if a.release:
            score(a.bin, run, os.path.abspath(a.release), tmp, f"http://127.0.0.1:{server.server_port}/")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        server.shutdown()


if __name__ == "__main__":
    main()
