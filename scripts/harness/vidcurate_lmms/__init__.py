"""An lmms-eval model plugin for vidcurate: `vidcurate_replay` answers from a predictions file."""
