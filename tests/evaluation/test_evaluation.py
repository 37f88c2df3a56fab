"""Evaluation: greedy decoding with the sampler, scoring plumbing, report files, the CLI end to end."""

import json
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from genenv_jax import evaluation
from genenv_jax.core.errors import CommandError
from genenv_jax.text import tokenization
from genenv_jax.text.chat_text import ChatText
from genenv_jax.domains.base import (ChatPrompt, Domain, Environment, ScoreResult, StepOutcome, Task,
                                     last_assistant_text)
from genenv_jax.domains.bfcl.domain import BFCLDomain
from genenv_jax.models import forward, init_params, preset


@pytest.fixture(scope="module")
def micro():
    cfg = preset("micro")
    return cfg, init_params(cfg, jax.random.key(1))


def _naive_greedy(cfg, params, prompt, n, stops, width=32):
    """Reference: one full forward per token on a single right-padded row (no mask, no batching);
    causal attention keeps the padding after the last real token from affecting its logits."""
    seq, out = list(prompt), []
    for _ in range(n):
        row = jnp.asarray([seq + [0] * (width - len(seq))])
        nxt = int(jnp.argmax(forward(cfg, params, row)[0, len(seq) - 1]))
        if nxt in stops:
            break
        out.append(nxt)
        seq.append(nxt)
    return out


def test_greedy_generate_fn_matches_unpadded_forward(micro):
    cfg, params = micro
    rng = np.random.default_rng(0)
    prompts = [rng.integers(3, cfg.vocab_size, size=n).tolist() for n in (5, 17, 9)]
    free = [_naive_greedy(cfg, params, p, 6, set()) for p in prompts]
    # Stop on the 3rd token the first prompt produces: that row ends early, the others do not.
    stop = free[0][2]
    want = [_naive_greedy(cfg, params, p, 6, {stop}) for p in prompts]
    generate_fn = evaluation.make_generate_fn(cfg, params, stop_tokens=[stop], pad_id=0)
    got = generate_fn(prompts, 6)
    assert got == want
    assert len(got[0]) == 2 and got[0] == free[0][:2]


def test_truncate_at_stop():
    assert evaluation.truncate_at_stop([5, 6, 2, 7, 2], [2]) == [5, 6]
    assert evaluation.truncate_at_stop([5, 6], [2]) == [5, 6]


@pytest.fixture(scope="module")
def tok(qwen_tokenizer):
    return qwen_tokenizer


def test_evaluate_scores_reference_responses_perfectly(tok, tmp_path):
    """A generate_fn that answers every prompt with the task's ground truth scores 100%."""
    domain = BFCLDomain()
    tasks = evaluation.select_tasks(domain.seeds("validation"), max_per_category=2)
    answers = {}
    for t in tasks:
        p = domain.agent_prompt(t)
        answers[tuple(ChatText.of(tok).prompt(p))] = \
            tokenization.encode(tok, domain.reference_response(t)) + [tokenization.im_end_id(tok)]
    stops = tokenization.stop_ids(tok)

    def oracle(prompts, max_new_tokens):
        return [evaluation.truncate_at_stop(answers[tuple(p)], stops) for p in prompts]

    report = evaluation.evaluate(domain, tasks, oracle, tok, max_new_tokens=64, batch_size=4, progress=False)
    assert len(report.items) == len(tasks) == 20
    assert all(row["accuracy"] == 1.0 and row["n"] == 2 for row in report.per_category.values())
    assert report.summary["overall"] == 1.0 and report.summary["live_ast"] == 1.0

    # Prompts over the limit are not decoded and count as failures.
    limit = sorted(len(k) for k in answers)[10]
    capped = evaluation.evaluate(domain, tasks, oracle, tok, max_prompt_tokens=limit, progress=False)
    too_long = [it for it in capped.items if it.error_type == "prompt_too_long"]
    assert len(too_long) == sum(len(k) > limit for k in answers) > 0
    assert capped.summary["overall_micro"] == pytest.approx(1 - len(too_long) / 20)

    paths = evaluation.write_report(report, tmp_path)
    data = json.loads(paths["json"].read_text())
    assert data["per_category"]["live_multiple"]["accuracy"] == 1.0 and data["report_version"] == 1
    assert "| live_multiple | 2 | 2 | 100.00% |" in paths["markdown"].read_text()
    assert len(paths["items"].read_text().splitlines()) == 20


def test_vocab_mismatch_is_rejected(tok, micro):
    cfg, params = micro
    with pytest.raises(ValueError, match="vocab_size 256 is smaller"):
        evaluation.evaluate_params(cfg, params, BFCLDomain(categories=("irrelevance",)), [], tok)


def test_cli_end_to_end_on_tiny_random_model(tmp_path, capsys):
    out = tmp_path / "eval"
    rc = evaluation.main(["--preset=tiny", "--split=test", "--max_per_category=1", "--max_new_tokens=3",
                          "--batch_size=4", "--max_prompt_tokens=800", f"--out={out}", "--no_progress"])
    assert rc == 0
    data = json.loads((out / "results.json").read_text())
    assert set(data["per_category"]) == set(BFCLDomain().categories)
    assert all(row["n"] == 1 and 0.0 <= row["accuracy"] <= 1.0 for row in data["per_category"].values())
    assert {"non_live_ast", "live_ast", "irrelevance", "overall", "overall_micro"} <= set(data["summary"])
    assert data["config"]["decoding"] == "greedy" and data["config"]["preset"] == "tiny"
    # The report says which prompt and which reading of the reply produced it (defaults resolved).
    assert {k: data["config"]["domain_options"][k] for k in ("mode", "prompt_format", "decoding")} == \
        {"mode": "fc", "prompt_format": "bfcl_fc_qwen25", "decoding": "bfcl"}
    items = [json.loads(line) for line in (out / "items.jsonl").read_text().splitlines()]
    assert len(items) == 10 and all(it["response_tokens"] <= 3 for it in items)
    # In the default prompt format (bfcl_fc_qwen25, docs indented) live_multiple_8-4-0 (1733 prompt
    # tokens), live_irrelevance_103-3-0 (2182) and live_parallel_multiple_1-1-0 (874) exceed the cap.
    assert sorted(it["task_id"] for it in items if it["error_type"] == "prompt_too_long") == \
        ["live_irrelevance_103-3-0", "live_multiple_8-4-0", "live_parallel_multiple_1-1-0"]
    assert "| summary | accuracy |" in (out / "results.md").read_text()
    assert "wrote" in capsys.readouterr().out


class _TwoTurnEnvironment(Environment):
    """After the first agent turn the environment asks for 'DONE'; success = obeying."""

    def __init__(self, task):
        self.task = task

    def reset(self):
        return ChatPrompt(messages=[{"role": "user", "content": self.task.prompt["q"]}])

    def step(self, agent_text):
        self.turns = getattr(self, "turns", 0) + 1
        if self.turns >= 2:
            return StepOutcome(observation=[], done=True)
        return StepOutcome(observation=[{"role": "user", "content": "say DONE"}], done=False)

    def score(self, transcript):
        return ScoreResult(float(last_assistant_text(transcript) == "DONE"), {"error_type": None})


class _TwoTurnDomain(Domain):
    """Test domain with a two-turn environment."""

    name = "two_turn"
    rejection_reasons = ()

    def seeds(self, split):
        return [Task(domain=self.name, task_id=f"t{i}", category="echo", prompt={"q": f"hi {i}"}, verifier={})
                for i in range(3)]

    def simulator_prompt(self, seed, recent_success=(), difficulty="similar", alpha=0.5):
        return ChatPrompt(messages=[{"role": "user", "content": "make a task"}])

    def parse_task(self, text, seed, difficulty=None):
        return seed

    def agent_prompt(self, task):
        return _TwoTurnEnvironment(task).reset()

    def environment(self, task):
        return _TwoTurnEnvironment(task)

    def score_details(self, task, response):
        return ScoreResult(float(response == "DONE"), {"error_type": None})

    def reference_response(self, task):
        return "DONE"

    def reference_generation(self, seed, sibling=None):
        return "a task"


def test_evaluate_runs_multi_turn_episodes(tok):
    seen_prompts = []

    def fake(prompts, max_new_tokens):
        seen_prompts.extend(tokenization.decode(tok, p) for p in prompts)
        return [tokenization.encode(tok, "DONE" if tokenization.decode(tok, p).count("say DONE") else "hello")
                for p in prompts]

    domain = _TwoTurnDomain()
    report = evaluation.evaluate(domain, domain.seeds("test"), fake, tok, progress=False)
    assert [it.reward for it in report.items] == [1.0, 1.0, 1.0]
    assert len(seen_prompts) == 6  # two turns per task
    assert all("<|im_start|>assistant\nhello<|im_end|>\n<|im_start|>user\nsay DONE" in p for p in seen_prompts[3:])
    assert report.items[0].response_tokens == len(tokenization.encode(tok, "hello")) + len(tokenization.encode(tok, "DONE"))
    one_turn = evaluation.evaluate(domain, domain.seeds("test"), fake, tok, max_turns=1, progress=False)
    assert [it.response for it in one_turn.items] == ["hello"] * 3 and one_turn.summary["overall"] == 0.0


def test_domain_options_read_json_values_over_the_run_defaults():
    got = evaluation.domain_options(["data_dir=/data/api-bank", "max_steps=30", "levels=[1, 2]", "flag=true"],
                                    {"data_dir": "/old", "keep": 1})
    assert got == {"data_dir": "/data/api-bank", "max_steps": 30, "levels": [1, 2], "flag": True, "keep": 1}
    with pytest.raises(CommandError, match="expected KEY=VALUE"):
        evaluation.domain_options(["data_dir"])


@pytest.mark.slow
def test_effective_options_are_the_domains_resolved_options_as_json():
    from genenv_jax.evaluation.cli import effective_options

    options = effective_options(BFCLDomain(categories=("irrelevance",), mode="prompting"))
    assert options["categories"] == ["irrelevance"] and options["split_fractions"] == \
        {"train": 0.7, "validation": 0.1, "test": 0.2}
    assert (options["mode"], options["prompt_format"], options["decoding"]) == \
        ("prompting", "bfcl_prompting_qwen25", "bfcl")
    assert json.loads(json.dumps(options)) == options


def test_cli_evaluates_peft_adapters_over_a_base_as_the_merged_model(tmp_path, capsys):
    """`--model_dir=BASE --adapter_dir=PEFT` decodes what the merged weights decode."""
    from genenv_jax.models import init_params, preset, save_hf
    from genenv_jax.models.lora import LoRAConfig, init_adapters, merge
    from genenv_jax.models.peft_io import save_peft_adapters
    from tests.support.random_params import with_random_b

    lora = LoRAConfig(rank=4, alpha=8.0)
    cfg = preset("tiny", param_dtype="float32", lora_scale=lora.scale)
    base = init_params(cfg, jax.random.key(0))
    adapters = with_random_b(init_adapters(cfg, lora, jax.random.key(1)), seed=2, std=0.5)
    save_hf(cfg, base, tmp_path / "base")
    save_hf(cfg, merge(base, adapters, lora.scale), tmp_path / "merged")
    save_peft_adapters(tmp_path / "adapters", cfg, adapters, lora)
    common = ["--split=test", "--max_per_category=1", "--max_new_tokens=4", "--batch_size=4",
              "--max_prompt_tokens=800", "--no_progress", "--categories=simple_python,irrelevance"]
    outputs = {}
    for name, source in (("adapted", [f"--model_dir={tmp_path / 'base'}", f"--adapter_dir={tmp_path / 'adapters'}"]),
                         ("merged", [f"--model_dir={tmp_path / 'merged'}"]),
                         ("base", [f"--model_dir={tmp_path / 'base'}"])):
        assert evaluation.main(source + common + [f"--out={tmp_path / (name + '-eval')}"]) == 0
        outputs[name] = [(it["task_id"], it["response"])
                         for it in map(json.loads, (tmp_path / (name + "-eval") / "items.jsonl").read_text().splitlines())]
    assert outputs["adapted"] == outputs["merged"]
    assert outputs["adapted"] != outputs["base"]  # the adapters change what is decoded
    assert json.loads((tmp_path / "adapted-eval" / "results.json").read_text())["config"]["adapter_dir"].endswith("adapters")
    # one line and exit status 2 (they raised SystemExit(text), exit status 1, before the shared error path)
    assert evaluation.main(["--preset=tiny", f"--adapter_dir={tmp_path / 'adapters'}", f"--out={tmp_path / 'x'}"]) == 2
    assert "--adapter_dir needs --model_dir" in capsys.readouterr().err
    (tmp_path / "no_adapters").mkdir()
    assert evaluation.main([f"--model_dir={tmp_path / 'base'}", f"--adapter_dir={tmp_path / 'no_adapters'}",
                            f"--out={tmp_path / 'x'}"]) == 2
    assert re.search(r"error: --adapter_dir: .*missing", capsys.readouterr().err)


def test_recorded_domain_options_rebuild_the_same_domain():
    """A report's `domain_options` (JSON: split_fractions as a mapping) build the domain again."""
    from genenv_jax.domains import get_domain
    from genenv_jax.evaluation.cli import effective_options

    domain = BFCLDomain(categories=("irrelevance",), mode="prompting")
    again = get_domain("bfcl", **effective_options(domain))
    assert again.split_fractions == domain.split_fractions and effective_options(again) == effective_options(domain)
    assert [t.metadata["split"] for t in again.seeds("all")] == [t.metadata["split"] for t in domain.seeds("all")]
    with pytest.raises(ValueError, match="split_fractions"):
        BFCLDomain(split_fractions={"train": 1.0, "tests": 0.0})
