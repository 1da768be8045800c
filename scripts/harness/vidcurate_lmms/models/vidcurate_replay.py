"""`--model vidcurate_replay --model_args predictions=FILE`: a model that answers every request
with the answer a predictions file gives its item and rotation (the file `vidcurate evaluate`
reads: CSV or JSONL with item_id, optional rotation, and prediction or answer), and an empty answer
where the file gives none, as `evaluate` counts a missing prediction as wrong. It reads the
visuals it is given (so the task's doc_to_visual runs) but no weights: it lets lmms-eval's
scoring of an exported vidcurate task be compared with `vidcurate evaluate` on the same answers.
"""

import csv
import json
from pathlib import Path

from lmms_eval.api.model import lmms
from lmms_eval.api.registry import register_model


@register_model("vidcurate_replay")
class Replay(lmms):
    def __init__(self, predictions: str = "", **kwargs) -> None:
        super().__init__()
        if not predictions:
            raise ValueError("vidcurate_replay needs --model_args predictions=FILE")
        self._answers = {}
        with open(predictions, newline="", encoding="utf-8") as f:
            if predictions.endswith(".jsonl"):
                rows = [json.loads(line) for line in f if line.strip()]
            else:
                rows = list(csv.DictReader(f))
        for row in rows:
            text = row.get("prediction", row.get("answer", ""))
            self._answers[(row["item_id"], int(row.get("rotation") or 0))] = str(text or "")
        self.visuals_seen = 0

    def generate_until(self, requests):
        out = []
        for context, gen_kwargs, doc_to_visual, doc_id, task, split in [r.args for r in requests]:
            doc = self.task_dict[task][split][doc_id]
            for v in doc_to_visual(doc):
                if isinstance(v, str) and not Path(v).is_file():
                    raise FileNotFoundError(f"{task}: doc_to_visual gave {v}, not a file")
                self.visuals_seen += 1
            key = (doc["item_id"], int(doc.get("rotation") or 0))
            out.append(self._answers.get(key, ""))
        return out

    def loglikelihood(self, requests):
        raise NotImplementedError("vidcurate tasks are generate_until")

    def generate_until_multi_round(self, requests):
        return self.generate_until(requests)
