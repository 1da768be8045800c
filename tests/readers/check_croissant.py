"""Loads a vidcurate release through its croissant.json with mlcroissant (the reference
implementation of Croissant) and compares every RecordSet's records with the rows pyarrow reads
from the same Parquet files. Prints one JSON object the Rust test (tests/croissant.rs) checks:

  {"record_sets": {NAME: {"records": N, "rows": M, "equal": bool, "diff": [...]}},
   "rai": {KEY: VALUE}, "file_objects": N, "conforms_to": "...", "images": N}

Values are compared after the forms each side uses are made one: mlcroissant gives text as
bytes, numbers as numpy scalars, lists as arrays, images as PIL images (compared by size) and
sub-fields under their Croissant ids; a struct member the Croissant file does not describe
(nested deeper than a sub-field) is left out of the Parquet side.
Usage: check_croissant.py RELEASE_DIR
"""
import glob
import json
import math
import os
import sys

import mlcroissant as mlc
import numpy as np
import pyarrow.parquet as pq

rel = sys.argv[1]
path = os.path.join(rel, "croissant.json")
doc = json.load(open(path))
ds = mlc.Dataset(jsonld=path)


IMAGES = [0]  # images decoded, on both sides


def norm(v):
    """One form for both sides."""
    if v is None:
        return None
    if isinstance(v, bytes):
        try:
            return v.decode("utf-8")
        except UnicodeDecodeError:
            return ["bytes", len(v)]
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float):
        return None if math.isnan(v) else round(v, 9)
    if isinstance(v, (list, tuple, np.ndarray)):
        return [norm(x) for x in v]
    if isinstance(v, dict):
        return {k.rsplit("/", 1)[-1]: norm(x) for k, x in v.items()}
    if hasattr(v, "size") and hasattr(v, "mode"):  # a PIL image
        IMAGES[0] += 1
        return ["image", list(v.size)]
    return v


def parquet_value(v, field):
    """A Parquet value cut to what the Croissant field describes, images decoded."""
    if v is None:
        return None
    subs = field.get("subField")
    if subs is None:
        return norm(v)
    kinds = {s["name"]: s.get("dataType") for s in subs}

    def cut(d):
        out = {}
        for name, kind in kinds.items():
            x = d.get(name)
            if kind == "sc:ImageObject" and x is not None:
                from PIL import Image
                import io
                x = Image.open(io.BytesIO(x))
            out[name] = norm(x)
        return out

    return [cut(d) for d in v] if isinstance(v, list) else cut(v)


result = {"record_sets": {}, "rai": {}, "conforms_to": doc.get("conformsTo")}
sets = {fs["@id"]: fs for fs in doc["distribution"] if fs["@type"] == "cr:FileSet"}
result["file_objects"] = sum(1 for o in doc["distribution"] if o["@type"] == "cr:FileObject")
for rs in doc["recordSet"]:
    name = rs["@id"]
    fields = rs["field"]
    records = []
    for r in ds.records(name):
        records.append({k.rsplit("/", 1)[-1]: norm(v) for k, v in r.items()})
    fs_id = (fields[0].get("source") or fields[0]["subField"][0]["source"])["fileSet"]["@id"]
    files = sorted(glob.glob(os.path.join(rel, sets[fs_id]["includes"])))
    rows = []
    for f in files:
        for row in pq.read_table(f).to_pylist():
            rows.append({fl["name"]: parquet_value(row.get(fl["name"]), fl) for fl in fields})
    key = lambda r: json.dumps(r, sort_keys=True, default=str)
    a, b = sorted(map(key, records)), sorted(map(key, rows))
    diff = [[x, y] for x, y in zip(a, b) if x != y][:2]
    result["record_sets"][name] = {
        "records": len(records), "rows": len(rows), "equal": a == b, "diff": diff,
        "fields": [f["name"] for f in fields],
    }
result["images"] = IMAGES[0]
result["rai"] = {k: v for k, v in doc.items() if k.startswith("rai:")}
print(json.dumps(result, default=str))
