"""Reads an exported lmms-eval task folder as lmms-eval 0.7.3 does, without lmms-eval: the
folder's `utils.py` imported as a module, and task YAMLs whose `!function utils.NAME` tags resolve
to that module's functions. Shared by check_harness.py and check_task_harness.py."""

import importlib.util

import yaml


def load_utils(root):
    """`root/utils.py` as a module."""
    spec = importlib.util.spec_from_file_location("harness_utils", root / "utils.py")
    utils = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(utils)
    return utils


def read_yaml(path, utils):
    """A task YAML with its `!function` tags resolved against `utils`."""

    class Loader(yaml.SafeLoader):
        pass

    def function(loader, node):
        name = loader.construct_scalar(node)
        assert name.startswith("utils."), name
        return getattr(utils, name[len("utils."):])

    Loader.add_constructor("!function", function)
    return yaml.load(path.read_text(encoding="utf-8"), Loader=Loader)
