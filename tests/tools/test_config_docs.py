"""docs/config.md is generated from the run config's declarations (`python -m genenv_jax.tools.config_docs
--out docs/config.md`): this fails when the page differs from what the generator prints now, when a
key of the default tree has no declaration or no doc, and when a key is neither set by some test (or
a packaged preset the tests validate) nor listed in DEFAULT_ONLY with the reason it keeps its default."""

import ast
from pathlib import Path

from genenv_jax.tools import config_docs
from tests.support import REPO

PAGE = REPO / "docs" / "config.md"
REGENERATE = "python -m genenv_jax.tools.config_docs --out docs/config.md"
POLICIES = ("agent", "simulator", "experience")

# Keys no test sets, each with why its default is all the suite needs. A key set by a test later
# must leave this list (the test below says so).
DEFAULT_ONLY = {
    "dreamgym.task_generation": "the DreamGym tests run its full setup, the simulator writing variants of "
                                "high-variance seeds; False only skips that step",
    "dreamgym.generated_task_share": "the cap on generated tasks; the DreamGym loop tests run at the paper's 0.5",
    "dreamgym.retrieve_real_only": "retrieval's source filter; the replay tests cover both sources in the buffer",
    "dreamgym.reasoning": "the experience prompt's reasoning switch, tested on `PromptSettings` and the fit "
                          "command's --reasoning, not through the run config",
    "dreamgym.grow_replay": "the DreamGym loop tests run with the buffer growing (the paper's setup)",
    "domain.seed_split": "the loop trains on the train split; other splits are read through evaluation.split",
    "replay.base_ratio": "the replay mix; tests keep the 50/50 default (only its sum's refusal is config logic)",
    "replay.historical_ratio": "the replay mix; tests keep the 50/50 default (only its sum's refusal is config logic)",
    "episodes.step_timeout_s": "passed unchanged to `episodes.limits.EnvLimits`, whose limits "
                               "tests/episodes/test_environment_limits.py sets directly",
    "episodes.max_observation_chars": "passed unchanged to `episodes.limits.EnvLimits`, whose limits "
                                      "tests/episodes/test_environment_limits.py sets directly",
    "log.wandb_project": "a name the offline W&B run is filed under; the tracker tests use the default",
    "log.mlflow_experiment": "a name the MLflow run is filed under; the tracker tests use the default",
    "agent.optimizer.b1": "AdamW's first-moment decay, optax's default; never varied",
    "agent.optimizer.b2": "AdamW's second-moment decay, optax's default; never varied",
    "simulator.optimizer.b1": "AdamW's first-moment decay, optax's default; never varied",
    "simulator.optimizer.b2": "AdamW's second-moment decay, optax's default; never varied",
    "agent.train.loss.overlong_penalty": "the overlong punishment's size, tested as `rl.advantages.overlong_penalty"
                                         "(factor=...)`; the loop tests keep 1.0",
    "simulator.train.grpo.overlong_penalty": "the overlong punishment's size, tested as `rl.advantages."
                                             "overlong_penalty(factor=...)`; the simulator writes one-turn tasks",
    "simulator.train.grpo.adv_eps": "the same GRPOConfig field as agent.train.loss.adv_eps, which tests set",
    "simulator.train.grpo.std_ddof": "the same GRPOConfig field as agent.train.loss.std_ddof, which tests set",
    "simulator.train.invalid_reward": "tested as `loop.simulator_grpo.generation_rewards(invalid_reward=...)`; "
                                      "the loop tests keep 0.0",
}


def test_config_page_is_current():
    page = PAGE.read_text()
    fresh = config_docs.render()
    if page != fresh:
        changed = [line for line in set(fresh.splitlines()) ^ set(page.splitlines())][:6]
        raise AssertionError(f"docs/config.md is stale; regenerate it with `{REGENERATE}`. Lines that differ "
                             f"(either side): {changed}")


def test_every_key_is_declared_with_its_doc():
    declared = config_docs.declarations()  # a key no field declares is a LookupError naming it
    assert [d.key for d in declared if not d.doc] == []
    assert len({d.key for d in declared}) == len(declared)
    assert "agent.train.loss.clip_high" in {d.key for d in declared}
    clip = next(d for d in declared if d.key == "agent.train.loss.clip_high")
    assert (clip.kind, clip.default, clip.rule) == ("float", 0.2, ">= 0")
    # the experience model's section holds only what it reads
    assert sorted(d.key.removeprefix("experience.") for d in declared if d.key.startswith("experience.")
                  and "." in d.key.removeprefix("experience.")) == [
        "optimizer.learning_rate", "sampling.batch_size", "sampling.max_new_tokens", "sampling.max_prompt_len",
        "sampling.prefix_cache_tokens", "sampling.temperature", "sampling.top_k", "sampling.top_p",
        "train.loss.chunk_size", "train.micro_batches"]


def _chain(node: ast.AST) -> list[str]:
    """`c.agent.sampling` as ["c", "agent", "sampling"]."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return parts[::-1]


def _settings_in(files) -> tuple[set[str], set[tuple[str, str]]]:
    """What the sources set: dotted keys (and their suffixes) named in strings (`"agent.lora.rank"`,
    `--config.epochs=1`), attribute assignments and `.update(...)` calls; and (callee, keyword) pairs."""
    dotted, keywords = set(), set()

    def add(parts):
        dotted.update(".".join(parts[i:]) for i in range(len(parts)))

    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value:
                for word in node.value.split():
                    if word.startswith("--config."):
                        add(word.removeprefix("--config.").split("=")[0].split("."))
                if " " not in node.value:
                    add(node.value.split("."))
            elif isinstance(node, (ast.Assign, ast.AugAssign)):
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    if isinstance(target, ast.Attribute):
                        add(_chain(target))
            elif isinstance(node, ast.Call) and _chain(node.func):
                callee = _chain(node.func)
                for keyword in (k.arg for k in node.keywords if k.arg):
                    keywords.add((callee[-1], keyword))
                    if callee[-1] == "update":
                        add(callee[:-1] + [keyword])
                    if "config" in callee[-1]:  # toy_config(epochs=1): a top-level key
                        dotted.add(keyword)
    return dotted, keywords


def test_every_key_is_set_by_a_test_or_listed_as_default_only():
    """A key counts as set when a test or a packaged preset names it in an override (a quoted dotted
    key, a `--config.` flag, an attribute assignment or `.update(...)`; a policy's key also by its
    path under any policy, as the tests' loops over policies set them), or passes its field as a
    keyword to the class that declares it (or to a `dict(...)` of such keywords)."""
    files = [p for p in sorted((REPO / "tests").rglob("*.py")) if p.name != Path(__file__).name]  # not this list
    files += sorted((REPO / "genenv_jax" / "configs").glob("*.py"))
    dotted, keywords = _settings_in(files)
    unset = set()
    for d in config_docs.declarations():
        head, _, tail = d.key.partition(".")
        field = d.key.rpartition(".")[2]
        if d.key in dotted or (head in POLICIES and tail in dotted) or \
                {(d.owner.__name__, field), ("dict", field)} & keywords:
            continue
        unset.add(d.key)
    assert sorted(unset - set(DEFAULT_ONLY)) == [], "set these keys in a test, or list them in DEFAULT_ONLY with why"
    assert sorted(set(DEFAULT_ONLY) - unset) == [], "a test sets these keys now (or they are gone): unlist them"
