"""The co-evolution loop end to end on ALFWorld's real engine (tiny models, a few generated games,
episodes stepped in worker processes). Skips without the optional extra."""

import json

import pytest

pytest.importorskip("alfworld", reason="needs the optional ALFWorld extra: pip install -e '.[alfworld]'")
pytest.importorskip("fast_downward", reason="needs the optional ALFWorld extra: pip install -e '.[alfworld]'")
pytestmark = pytest.mark.alfworld  # needs the optional engine (make alfworld)

from genenv_jax.configs import alfworld as config_module  # noqa: E402
from genenv_jax.loop import CoEvolution  # noqa: E402
from genenv_jax.configs.run_config import RunConfig  # noqa: E402

TYPES = ("pick_and_place_simple", "look_at_obj_in_light")


def smoke_config(cache_dir):
    c = config_module.get_config("tiny")
    c.domain.options.update(games={"train": 4, "validation": 0, "test": 2}, task_types=TYPES,
                            cache_dir=str(cache_dir), build_workers=1, max_steps=6)
    c.epochs = 1
    c.warmstart.enabled = False  # (its demonstration rows are tested in test_alfworld.py)
    c.evaluation.split = ""      # (per-type evaluation on the engine is tested in test_alfworld.py)
    c.agent.sampling.update(max_new_tokens=8)
    c.simulator.sampling.update(max_new_tokens=16)
    c.episodes.update(max_turns=3, max_total_tokens=2048, env_workers=2)
    c.log.progress_bars = False
    return RunConfig.from_config_dict(c)


@pytest.mark.slow
def test_tiny_alfworld_run_end_to_end(tmp_path):
    loop = CoEvolution(smoke_config(tmp_path / "cache"), tmp_path / "run")
    rows = loop.run()
    assert [r["epoch"] for r in rows] == [0]
    row = rows[0]
    # The simulator's generations were read (a random tiny model writes no valid spec: each is
    # rejected with a counted reason); the agent still trained on replayed seed games.
    assert row["generated"] == sum(v for k, v in row.items() if k.startswith("rejected/")) + row["tasks"]
    assert row["replayed_tasks"] == 2 and "agent/loss" in row
    # Multi-turn episodes on the engine, in worker processes, ended by the step cap or the turn cap.
    assert row["episodes/turns_mean"] >= 1 and row["env_steps_per_s"] > 0
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["epoch"] for m in metrics] == [0] and metrics[0]["episodes/turns_mean"] == row["episodes/turns_mean"]
    ends = sum(v for k, v in row.items() if k.startswith("episodes/end/"))
    assert ends == 2 * 2  # 2 replayed seed games x 2 rollouts
