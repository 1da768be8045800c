# lmms-eval's LMMS_EVAL_PLUGINS mechanism reads this map: model name -> class in models/<name>.py.
AVAILABLE_MODELS = {"vidcurate_replay": "Replay"}
