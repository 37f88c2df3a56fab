"""A run's generated tasks as a dataset: every task of its D_env pool (the simulator's accepted,
verified and scored tasks) as one Parquet file, and for BFCL runs also as BFCL's own question and
possible-answer files.

Which tasks: the D_env shards the run's latest checkpoint lists (`pool_manifests`), the state a
resume continues from; a shard written after it (an epoch cut short) is left out, as a resume
would drop it. Each row is one task with the numbers the curriculum gave it (p_hat, R_env, in
band, RWR weight), the epoch that generated it and the run's mode.

The task's `prompt` and `verifier` are domain-defined JSON objects whose shapes differ between
domains and even between tasks (BFCL function docs), so they are stored as JSON text columns
(`json.loads` gives them back); the whole task is in `task` (`domains.base.Task.from_json`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from genenv_jax.workdir import storage

PARQUET_FILE = "tasks.parquet"
BFCL_DIR = "bfcl"
POOL = "d_env"


def _columns():
    import pyarrow as pa

    return {
        "task_id": pa.string(), "domain": pa.string(), "category": pa.string(), "seed_id": pa.string(),
        "difficulty": pa.string(), "epoch": pa.int32(), "mode": pa.string(),
        "prompt": pa.string(), "verifier": pa.string(), "generation": pa.string(),
        "p_hat": pa.float64(), "r_env": pa.float64(), "in_band": pa.bool_(), "weight": pa.float64(),
        "task": pa.string(),
    }


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def task_rows(records_by_epoch: Mapping[int, Sequence[Mapping[str, Any]]], mode: str) -> list[dict[str, Any]]:
    """One row per D_env record (`loop.records.d_env_records`), epochs in order."""
    rows = []
    for epoch in sorted(records_by_epoch):
        for r in records_by_epoch[epoch]:
            task = r["task"]
            rows.append({
                "task_id": task["task_id"], "domain": task["domain"], "category": task["category"],
                "seed_id": r["seed_id"], "difficulty": r["difficulty"], "epoch": int(epoch), "mode": mode,
                "prompt": _json(task["prompt"]), "verifier": _json(task["verifier"]), "generation": r["generation"],
                "p_hat": float(r["p_hat"]), "r_env": float(r["r_env"]), "in_band": bool(r["in_band"]),
                "weight": None if r.get("weight") is None else float(r["weight"]), "task": _json(task),
            })
    return rows


def run_tasks(run_dir: str | os.PathLike) -> tuple[dict[int, list[dict]], dict[str, Any]]:
    """(epoch -> D_env records, the saved config snapshot) of a run's latest checkpoint; a
    ValueError in one line where the run has no checkpoint, no D_env pool, or a pool that does not
    hold what the checkpoint lists."""
    from genenv_jax.workdir.checkpoints import Checkpointer
    from genenv_jax.workdir.pools import Pool

    ckpt = Checkpointer(storage.as_path(run_dir) / "checkpoints", async_save=False)
    try:
        epoch = ckpt.latest_epoch()
        if epoch is None:
            raise ValueError(f"{run_dir}: no checkpoint, so no committed tasks")
        meta = ckpt.metadata(epoch)
    finally:
        ckpt.close()
    root = storage.as_path(run_dir) / "pools"
    if not storage.exists(root / POOL / "manifest.json"):
        raise ValueError(f"{run_dir}: no {POOL} pool (pools/{POOL}/manifest.json); the run generated no tasks")
    pool = Pool(root, POOL, writable=False)
    if pool.problem is not None:
        raise ValueError(f"{pool.dir}: {pool.problem}")
    listed = ((meta.get("pool_manifests") or {}).get(POOL) or {}).get("shards")
    epochs = sorted(int(s["epoch"]) for s in listed) if listed is not None else pool.epochs
    missing = sorted(set(epochs) - set(pool.epochs))
    if missing:
        raise ValueError(f"{pool.dir}: the checkpoint of epoch {epoch} lists shards of epochs {missing} "
                         "that the pool does not hold")
    return {e: pool.records(e) for e in epochs}, meta["config"]


def write_parquet(rows: Sequence[Mapping[str, Any]], path: str | os.PathLike, extra: Mapping[str, Any] = ()) -> Path:
    """`rows` as a Parquet file of the columns above (+ `extra` {name: pyarrow type})."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema(list(_columns().items()) + list(dict(extra).items()))
    pq.write_table(pa.Table.from_pylist(list(rows), schema=schema), str(path))
    return Path(path)


# ----------------------------------------------------------------------------------------------
# BFCL's own files
# ----------------------------------------------------------------------------------------------
def bfcl_entries(rows: Sequence[Mapping[str, Any]]) -> tuple[list[str], dict[str, list[dict]], dict[str, list[dict]]]:
    """(BFCL id per row, category -> question entries, category -> possible-answer entries).

    Ids are `<category>_<n>` (n counting within the category in row order), the form BFCL's own
    tools read the category from (`bfcl_eval.utils.extract_test_category_from_id`). A question
    entry is `{"id", "question": [turn], "function"}` (one turn: single-turn BFCL), an answer entry
    `{"id", "ground_truth"}`; irrelevance categories have no answers, as in BFCL's data."""
    from genenv_jax.domains.bfcl.data import IRRELEVANCE_CATEGORIES

    ids, questions, answers = [], {}, {}
    for row in rows:
        category, prompt = row["category"], json.loads(row["prompt"])
        entry_id = f"{category}_{len(questions.setdefault(category, []))}"
        ids.append(entry_id)
        questions[category].append({"id": entry_id, "question": [prompt["question"]], "function": prompt["functions"]})
        if category not in IRRELEVANCE_CATEGORIES:
            answers.setdefault(category, []).append(
                {"id": entry_id, "ground_truth": json.loads(row["verifier"])["ground_truth"]})
    return ids, questions, answers


def bfcl_file_name(category: str) -> str:
    """BFCL's data file name of a category (e.g. BFCL_v4_simple_python.json: JSON lines)."""
    from genenv_jax.domains.bfcl.data import VERSION_PREFIX

    return f"{VERSION_PREFIX}_{category}.json"


def write_bfcl(questions: Mapping[str, list[dict]], answers: Mapping[str, list[dict]], directory: Path) -> list[Path]:
    """BFCL's layout under `directory`: one question file per category and `possible_answer/`
    with the answers, JSON lines as BFCL ships them."""
    written = []
    for sub, entries in (("", questions), ("possible_answer", answers)):
        (directory / sub).mkdir(parents=True, exist_ok=True)
        for category, items in entries.items():
            path = directory / sub / bfcl_file_name(category)
            path.write_text("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in items), encoding="utf-8")
            written.append(path)
    return written


def export_tasks(run_dir: str | os.PathLike, staging: Path) -> dict[str, Any]:
    """Writes the run's tasks into `staging` (tasks.parquet; bfcl/ for a BFCL run); returns a
    summary for the export manifest."""
    import pyarrow as pa

    records, snapshot = run_tasks(run_dir)
    domain = (snapshot.get("domain") or {}).get("name", "")
    rows = task_rows(records, str(snapshot.get("mode", "")))
    summary: dict[str, Any] = {"domain": domain, "mode": snapshot.get("mode"), "tasks": len(rows),
                               "in_band": sum(r["in_band"] for r in rows), "epochs": sorted(records),
                               "files": [PARQUET_FILE]}
    if domain == "bfcl":
        ids, questions, answers = bfcl_entries(rows)
        rows = [dict(r, bfcl_id=i) for r, i in zip(rows, ids)]
        written = write_bfcl(questions, answers, staging / BFCL_DIR)
        summary["files"] += [str(p.relative_to(staging)) for p in written]
        write_parquet(rows, staging / PARQUET_FILE, {"bfcl_id": pa.string()})
    else:
        write_parquet(rows, staging / PARQUET_FILE)
    return summary
