#!/usr/bin/env python3
"""llama.cpp's server (as the xllamacpp wheel embeds it) on 127.0.0.1, for tests/llama.rs.

usage: python serve.py MODEL.gguf PORT [--ctx N] [--mmproj MMPROJ.gguf]

Serves /health, /v1/models and /v1/chat/completions as llama-server does, one slot, one thread
(the tests' model is tiny). With --mmproj (a multimodal projector, e.g. from make_mmproj.py) the
chat endpoint also takes images (`image_url` parts), encoded on the CPU. Runs until it is
killed."""
import sys
import time

import xllamacpp as xlc

args = sys.argv[1:]
ctx = int(args[args.index("--ctx") + 1]) if "--ctx" in args else 512
params = xlc.CommonParams()
params.model.path = args[0]
params.n_ctx = ctx
if "--mmproj" in args:
    params.mmproj.path = args[args.index("--mmproj") + 1]
    params.mmproj_use_gpu = False
params.n_parallel = 1
params.cpuparams.n_threads = 1
params.cpuparams_batch.n_threads = 1
params.hostnames = ["127.0.0.1"]
params.port = int(args[1])
server = xlc.Server(params)
print("listening", server.listening_address, flush=True)
while True:
    time.sleep(3600)
