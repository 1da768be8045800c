# lmms-eval plugins must have a tasks package; the tasks come from the release (--include_path).
