"""The DreamGym comparison's arms and report: every arm is a valid mode=dreamgym run config that
differs from the others only in dreamgym keys (equal agent updates), and the report reads the
arms' metrics as the loop writes them."""

import json

from genenv_jax.tools import dreamgym_compare as compare
from genenv_jax.loop.persistence import config_changes
from genenv_jax.configs.run_config import RunConfig


def test_arms_are_valid_configs_that_differ_only_in_dreamgym_keys(tmp_path):
    (tmp_path / "tokenizer").mkdir()
    arms = compare.arms(5)
    assert list(arms) == ["real_grpo", "dreamgym", "dreamgym_s2r", "no_replay", "no_reasoning", "no_taskgen"]
    configs = {name: RunConfig.from_config_dict(compare.comparison_config(tmp_path, 5, 0, keys))
               for name, keys in arms.items()}
    base = configs["dreamgym"]
    for name, config in configs.items():
        changed = {key for key, *_ in config_changes(base.snapshot, config.snapshot)}
        assert changed == {f"dreamgym.{k}" for k in arms[name]}, name
        assert config.mode == "dreamgym" and config.epochs == 5
    d = {name: c.dreamgym for name, c in configs.items()}
    assert [e for e in range(5) if d["real_grpo"].synthetic(e)] == []
    assert [e for e in range(5) if d["dreamgym"].synthetic(e)] == [0, 1, 2, 3, 4]
    assert [e for e in range(5) if d["dreamgym_s2r"].synthetic(e)] == [0, 1, 2]
    assert (d["no_replay"].top_k, d["no_reasoning"].reasoning, d["no_taskgen"].task_generation) == (0, False, False)


def test_summary_and_report_from_metrics_files(tmp_path):
    run = tmp_path / "runs" / "dreamgym_s2r"
    run.mkdir(parents=True)
    rows = [{"epoch": -1, "heldout/accuracy": 0.0, "experience/sft_loss_first": 6.0, "experience/sft_loss_last": 1.0},
            {"epoch": 0, "heldout/accuracy": 0.25, "success_rate": 0.5, "dreamgym/synthetic_epoch": 1.0,
             "dreamgym/generation_requests": 1, "dreamgym/generated_tasks": 0, "env_errors/experience_unparseable": 3,
             "replay/size": 10.0},
            {"epoch": 1, "heldout/accuracy": 0.5, "success_rate": 0.25, "dreamgym/synthetic_epoch": 0.0,
             "dreamgym/generation_requests": 2, "dreamgym/generated_tasks": 1, "replay/size": 10.0}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "done.json").write_text(json.dumps({"seconds": 90.0}))
    (run / "train_games.json").write_text(json.dumps({"epoch": 1, "start": 0.125, "final": 0.375, "games": 8}))
    summary = compare.summarise(tmp_path, ["real_grpo", "dreamgym_s2r"])  # real_grpo never ran: left out
    s = summary["dreamgym_s2r"]
    assert list(summary) == ["dreamgym_s2r"]
    assert (s["heldout_start"], s["heldout_final"], s["heldout_by_epoch"]) == (0.0, 0.5, [0.25, 0.5])
    assert (s["synthetic_epochs"], s["agent_updates"], s["generated_tasks"], s["generation_requests"]) == (1, 2, 1, 3)
    assert s["experience_failures"] == 3 and s["seconds"] == 90.0 and s["experience_sft_loss"] == [6.0, 1.0]
    line = compare.report(summary, 2).splitlines()[-1]
    assert (s["train_games_start"], s["train_games_final"]) == (0.125, 0.375)
    assert line == ("| dreamgym_s2r | 0.000 | 0.500 | 0.250 0.500 | 0.125 -> 0.375 | 0.500 0.250 | 1 | 1/3 | 3 | "
                    "1.5 min |")
