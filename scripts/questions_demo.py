#!/usr/bin/env python3
"""The shipped pipelines/harmvideo-questions.toml, run end to end offline, and its question table.

Nothing is changed in the pipeline but its two service base URLs and its source folder: probe ->
12 frames -> transcript (json3 captions beside each clip, so no speech call) -> language ->
caption -> questions -> blind -> level_check, then `vidcurate questions RUN`.

The models are a STAND-IN, not a model: a local OpenAI-compatible server on 127.0.0.1 that answers
in the body of a recorded `json_schema` chat completion (tests/fixtures/llm/openai/). It drafts
items the way the papers warn drafting models do, so that every check has something to find:

- drafts always put the correct option first (the shuffle must balance the letters);
- some first answers break a rule and are fixed by the repair (three options; two options alike);
- some break one twice and are rejected (the answer's words in the question; options of very
  different lengths; a beyond-clip item without its missing-context note);
- the "blind" model answers with the longest option, the text-only shortcut real models take, so
  items whose correct option is the longest are flagged;
- the "level" model sorts by keywords of the question, so items worded against their level
  disagree.

So the table shows what the stage and its checks do over a few dozen videos, not how good any
model's items are.

With --release DIR it goes on to the benchmark: `split`, `release` (the `questions` config
beside the videos'), `evaluate --rotations-out` (every test item once per rotation of its options),
and `evaluate` of two STAND-IN answerers, not models, chosen to show what the scoring guards
against: `longest` (names the longest option: the text-only shortcut) and `always-A` (position
bias: right only when the answer is shown first, so CircularEval gives it nothing).

Usage: scripts/questions_demo.py [--videos N] [--bin PATH] [--keep DIR] [--release DIR]
"""
import argparse
import concurrent.futures
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

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BIN = os.path.join(ROOT, "target", "release", "vidcurate")
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "llm", "openai", "chat_completion_json_schema.json")
FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
WORDS = ["amber", "blue", "crimson", "delta", "ember", "falcon", "granite", "harbour", "indigo",
         "juniper", "kestrel", "lantern", "meadow", "nickel", "orchid", "pepper", "quartz", "raven",
         "saffron", "thistle", "umber", "violet", "willow", "yarrow"]
# A quarter of the clips speak Chinese, so the language column has two values.
ZH = "这是一个测试画面，屏幕左上角写着一个英文单词，用来检查电视机的颜色和对比度。"


def clip_dir(n):
    d = os.path.join(ROOT, "data", "bench", f"harmvideo-{n}")
    os.makedirs(d, exist_ok=True)

    def make(i):
        name, word = f"hv{i:04d}", WORDS[i % len(WORDS)]
        mp4, cap = os.path.join(d, f"{name}.mp4"), os.path.join(d, f"{name}.en.json3")
        if not os.path.exists(mp4):
            tmp = os.path.join(d, f".{name}.tmp.mp4")
            subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-y",
                            "-f", "lavfi", "-i", "testsrc2=s=160x90:r=25:d=2", "-f", "lavfi", "-i", "sine=d=2",
                            # The clip's name too: clips with the same word would be the same
                            # bytes, and a content-addressed source keeps one of them.
                            "-vf", f"drawtext=fontfile={FONT}:text={word}:fontsize=16:fontcolor=white:"
                                   "box=1:boxcolor=black:x=4:y=4,"
                                   f"drawtext=fontfile={FONT}:text={name}:fontsize=10:fontcolor=white:x=4:y=74",
                            "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p",
                            "-c:a", "aac", "-shortest", tmp], check=True)
            os.replace(tmp, mp4)
        if not os.path.exists(cap):
            said = f"{ZH}编号 {name}。" if i % 4 == 1 else f"This is test card {name}. The word in the corner reads {word}, for tuning colour and contrast."
            with open(cap, "w") as f:
                json.dump({"events": [{"tStartMs": 100, "dDurationMs": 1800, "segs": [{"utf8": said}]}]}, f,
                          ensure_ascii=False)

    with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 2) as pool:
        list(pool.map(make, range(n)))
    return d


def body(text):
    with open(FIXTURE) as f:
        v = json.load(f)
    v["choices"][0]["message"]["content"] = text
    return json.dumps(v).encode()


def item(level, question, options, note=""):
    return {"level": level, "question": question, "options": options, "answer": "A",
            "evidence": {"frames": [0, 5], "start_secs": 0.1, "end_secs": 1.9, "transcript": ""},
            "rationale": "Seen in the frames and said in the transcript.", "context_note": note}


def draft(i, repair):
    """The stand-in drafter's items for clip i (first answer, or the answer to the repair)."""
    word = WORDS[i % len(WORDS)]
    others = [w for w in WORDS if w != word]
    o = [others[(i * 7 + k * 5) % len(others)] for k in range(3)]
    obs_q = "Which word is written in the top-left corner of the frames?"
    if i % 11 == 5:  # the answer's words in the question, both times
        obs_q = f"Is the word in the corner {word}, or some other word?"
    obs = [word, o[0], o[1], o[2]]
    internal_q = "What does the clip, taken as a whole, present itself as?"
    if i % 5 == 2:  # worded as an observable question: the level model disagrees
        internal_q = "What is shown on the screen from start to end, taken as one message?"
    internal = [f"A test card labelled {word}", "A news report on a street protest",
                "An advertisement for a soft drink", "A lecture about road safety"]
    if i % 7 == 3 and not repair:  # three options; the repair gives four
        internal = internal[:3]
    if i % 13 == 9 and not repair:  # two options alike; the repair fixes it
        internal[3] = internal[2].upper()
    if i % 9 == 4:  # lengths far apart, both times
        internal[1] = "A long news report on a protest that turned into a riot in the city centre at night"
    beyond_q = "Why would a broadcaster air a picture like this between programmes?"
    beyond = ["So that viewers could tune their sets", "To announce a national emergency",
              "To mark the start of a public holiday", "To advertise a football match tonight"]
    note = "Test cards were broadcast so that viewers could adjust their receivers."
    if i % 8 == 6:  # no missing-context note, both times
        note = ""
    return {"items": [item("observable_evidence", obs_q, obs),
                      item("clip_internal_meaning", internal_q, internal),
                      item("beyond_clip_reasoning", beyond_q, beyond, note)]}


def blind_answer(prompt, seed):
    """The longest option's letter (seed 2: the second longest), as text-only shortcuts do."""
    opts = re.findall(r"^([A-Z])\. (.*)$", prompt, re.M)
    ranked = sorted(opts, key=lambda o: -len(o[1]))
    return ranked[1 if seed == 2 and len(ranked) > 1 else 0][0]


def level_of(prompt):
    q = re.search(r"^Question: (.*)$", prompt, re.M).group(1).lower()
    if any(w in q for w in ["written", "shown", "corner"]):
        return "observable_evidence"
    if q.startswith("why") or "between programmes" in q:
        return "beyond_clip_reasoning"
    return "clip_internal_meaning"


class StandIn(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    calls = {}
    lock = threading.Lock()

    def do_POST(self):
        v = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        content = v["messages"][0]["content"]
        prompt = content if isinstance(content, str) else " ".join(
            p.get("text", "") for p in content if isinstance(p, dict))
        name = (v.get("response_format") or {}).get("json_schema", {}).get("name", "blind")
        with StandIn.lock:
            StandIn.calls[name] = StandIn.calls.get(name, 0) + 1
        if name == "caption":
            out = json.dumps({"caption": "A test card of colour bars with one word in a black box at the top left; a tone plays."})
        elif name == "question_items":
            m = re.search(r"hv(\d{4})", prompt) or re.search(r"Title: .*?(\d+)", prompt)
            i = int(m.group(1)) if m else int(hashlib.sha1(prompt.encode()).hexdigest(), 16) % 1000
            out = json.dumps(draft(i, "had these problems" in prompt))
        elif name == "item_level":
            out = json.dumps({"level": level_of(prompt)})
        else:
            out = blind_answer(prompt, v.get("seed", 0))
        b = body(out)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)

    def log_message(self, *a):
        pass


def answer(kind, options):
    """A stand-in answerer's raw answer to one rotated item."""
    if kind == "always-A":
        return "A"
    # Ties broken by the text, so the same option wins under every rotation.
    k = max(range(len(options)), key=lambda i: (len(options[i]), options[i]))
    return f"The answer is {chr(65 + k)} because it is the longest option."


def score(bin_, run, release, tmp):
    """split -> release -> rotations -> evaluate two stand-in answerers (--by language)."""
    def vc(*args):
        r = subprocess.run([bin_, *args], capture_output=True, text=True)
        if r.returncode != 0:
            sys.stderr.write(r.stderr)
            sys.exit(f"vidcurate {args[0]} exited {r.returncode}")
        return r.stdout
    vc("split", run, "--stratify", "language")
    shutil.rmtree(release, ignore_errors=True)
    print(vc("release", run, "--out", release, "--frames", "none").strip())
    rot = os.path.join(tmp, "rotations.jsonl")
    print(vc("evaluate", release, "--rotations-out", rot).strip())
    lines = [json.loads(l) for l in open(rot)]
    for kind in ["longest", "always-A"]:
        preds = os.path.join(tmp, f"{kind}.jsonl")
        with open(preds, "w") as f:
            for l in lines:
                f.write(json.dumps({"item_id": l["item_id"], "rotation": l["rotation"],
                                    "prediction": answer(kind, l["options"])}, ensure_ascii=False) + "\n")
        print(f"\n$ vidcurate evaluate {os.path.relpath(release, ROOT)} {kind}.jsonl --by language   # stand-in answerer: {kind}")
        print(vc("evaluate", release, preds, "--by", "language"), end="")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--videos", type=int, default=48)
    ap.add_argument("--bin", default=BIN)
    ap.add_argument("--keep", help="write the run directory here (default: a temporary folder)")
    ap.add_argument("--release", help="then split, release into this folder and score two stand-in answerers")
    a = ap.parse_args()
    videos = clip_dir(a.videos)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}/v1/"
    with open(os.path.join(ROOT, "pipelines", "harmvideo-questions.toml")) as f:
        text = f.read()
    text = text.replace('base_url = "https://api.openai.com/v1/"', f'base_url = "{url}"')
    text = text.replace('dir = "../data/harmvideo"', f'dir = "{videos}"')
    text = text.replace('"taxonomies/harmvideobench.toml"',
                        json.dumps(os.path.join(ROOT, "pipelines", "taxonomies", "harmvideobench.toml")))
    text = text.replace('"tasks/harmvideobench/levels.toml"',
                        json.dumps(os.path.join(ROOT, "pipelines", "tasks", "harmvideobench", "levels.toml")))
    tmp = tempfile.mkdtemp(prefix="vc-questions-")
    try:
        p = os.path.join(tmp, "harmvideo-questions.toml")
        with open(p, "w") as f:
            f.write(text)
        run = a.keep or os.path.join(tmp, "run")
        if a.keep:
            shutil.rmtree(run, ignore_errors=True)
        env = dict(os.environ, OPENAI_API_KEY="sk-stand-in")
        t0 = time.perf_counter()
        r = subprocess.run([a.bin, "run", p, "--out", run], env=env, capture_output=True, text=True)
        secs = time.perf_counter() - t0
        if r.returncode not in (0, 3):
            sys.stderr.write(r.stderr)
            sys.exit(f"vidcurate run exited {r.returncode}")
        summary = [l for l in r.stderr.splitlines() if "questions:" in l]
        calls = ", ".join(f"{k} {v}" for k, v in sorted(StandIn.calls.items()))
        print(f"{a.videos} clips, pipelines/harmvideo-questions.toml against the stand-in server: "
              f"{secs:.1f} s, exit {r.returncode}; calls: {calls}")
        for l in summary:
            print("  " + l.strip())
        t = subprocess.run([a.bin, "questions", run], capture_output=True, text=True, check=True)
        print(t.stdout, end="")
        if a.release:
            score(a.bin, run, a.release, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        server.shutdown()


if __name__ == "__main__":
    main()
