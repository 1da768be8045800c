"""The rows of a run's table folders as pyarrow, DuckDB and Polars read them, by the lines the book
shows (docs/src/guide/resume-and-repair.md, the block after "readers of the run folder"), run on
RUN for each TABLE instead of data/runs/demo and probe.

    python run_folder.py BOOK_PAGE RUN TABLE [TABLE ...]

Prints JSON: {table: {"pyarrow": [...], "duckdb": [...], "polars": [...]}}, each a sorted list of
the rows (as JSON objects without the volatile columns) that reader read.
"""

import glob
import json
import os
import re
import sys

VOLATILE = {"rejected_at", "latency_ms", "cost_usd"}


def book_block(page):
    text = open(page).read()
    at = text.index("<!-- readers of the run folder")
    m = re.search(r"```python\n(.*?)```", text[at:], re.S)
    return m.group(1)


def rows(table):
    out = []
    for r in table.to_pylist():
        out.append(json.dumps({k: v for k, v in r.items() if k not in VOLATILE},
                              sort_keys=True, default=str))
    return sorted(out)


def main():
    page, run, tables = sys.argv[1], sys.argv[2], sys.argv[3:]
    block = book_block(page)
    result = {}
    for table in tables:
        if not glob.glob(os.path.join(run, table, "*.parquet")):
            # DuckDB and Polars refuse a glob that matches no file: an empty table.
            result[table] = {"pyarrow": [], "duckdb": [], "polars": []}
            continue
        code = block.replace('"data/runs/demo"', json.dumps(run)).replace("/probe", f"/{table}")
        scope = {}
        exec(code, scope)
        result[table] = {
            "pyarrow": rows(scope["t"]),
            "duckdb": rows(scope["d"]),
            "polars": rows(scope["p"].to_arrow()),
        }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
