"""`python -m genenv_jax.tools.tpu_memory`: the slice table, the shapes a config allows, resident-state sizes,
a real compile-only plan of a micro-model config, the search for a plan that fits (real compiles
once, synthetic program sizes for the branches), and one-line CLI errors."""

from __future__ import annotations

import functools
import subprocess
import sys

import numpy as np
import pytest

from genenv_jax.tools import tpu_memory as plan
from genenv_jax.configs import bfcl, bfcl_multiturn
from genenv_jax.tools.memory_plan import GIB, Measurer, PlanError, ProgramMemory, sampler_shape, update_shape
from genenv_jax.models import preset
from tests.support import REPO, subprocess_env

SMALL = plan.Slice("v5litepod-4", 4, 16.0, 1)


def micro_config():
    """bfcl:tiny with the 256-token-vocabulary micro model and short shapes (fast compiles); agent
    and simulator share one sampler shape, so the sampler is compiled once."""
    c = bfcl.get_config("tiny")
    for p in (c.agent, c.simulator):
        p.preset = "micro"
        p.remat_policy = "full"  # the search's least-memory remat: one compile finds a fitting plan
        p.sampling.update(max_prompt_len=64, max_new_tokens=16, batch_size=8,
                          prefix_cache_tokens=256)  # small: the tests squeeze the update phases
    c.agent.train.tasks_per_step = 2      # x 4 rollouts = 8 rows: 2 per device on 4 chips
    c.simulator.train.tasks_per_step = 4  # 4 rows: 1 per device
    return c


@pytest.fixture(scope="module")
def measured():
    """The micro config's real plan on 4 chips (compiled once for the module) and its printout."""
    run = plan.load_run_config(micro_config(), SMALL.chips)
    measurer = Measurer(run, SMALL.chips)
    lines: list[str] = []
    base = plan.report(run, "micro", SMALL, measurer=measurer, out=lines.append)
    return run, measurer, base, "\n".join(lines)


def test_slice_table():
    assert plan.find_slice("v5p-8") == plan.Slice("v5p-8", 4, 95, 1)
    assert plan.find_slice("v4-32") == plan.Slice("v4-32", 16, 32, 4)
    assert plan.find_slice("v5e-16") == plan.find_slice("v5litepod-16") == plan.Slice("v5litepod-16", 16, 16, 4)
    assert plan.find_slice("v6e-8") == plan.Slice("v6e-8", 8, 32, 1)
    for s in plan.SLICES.values():
        assert s.chips % s.hosts == 0 and s.chips // s.hosts <= 8
    with pytest.raises(PlanError, match="unknown slice 'v9-8'; known: v4-8"):
        plan.find_slice("v9-8")


def test_shapes_at_the_largest_the_config_allows():
    run = plan.load_run_config(bfcl.get_config("7b"), 4)
    assert update_shape(run, run.agent, 4, 1) == (128, 4096 + 512)    # 16 tasks x 8 rollouts
    assert update_shape(run, run.simulator, 4, 1) == (64, 4096 + 1024)
    assert update_shape(run, run.simulator, 16, 8) == (128, 5120)     # padded to 16 devices x 8 micro-batches
    assert sampler_shape(run, run.agent, 4, 64) == (64, 4096, 512)
    assert sampler_shape(run, run.agent, 16, 24) == (32, 4096, 512)   # power of two, multiple of data x fsdp
    multi = plan.load_run_config(bfcl_multiturn.get_config("7b"), 4)
    # a row is the first prompt plus all turns and observations, up to max_total_tokens (16,384):
    # a 3,073-token prompt (bucket 4,096) with a 13,311-token rest (bucket 16,384) is a worst case
    assert update_shape(multi, multi.agent, 4, 1) == (128, 4096 + 16384)
    assert sampler_shape(multi, multi.agent, 4, 64) == (64, 16384, 512)  # later turns' prompts
    assert update_shape(multi, multi.simulator, 4, 1) == (64, 4096 + 2048)


def test_resident_state_of_the_7b_preset():
    run = plan.load_run_config(bfcl.get_config("7b"), 4)
    m = Measurer(run, 4).measure("agent", (1, 4, 1), plan.config_knobs(run.agent), with_programs=False)
    n = preset("qwen2.5-7b").num_params()
    assert m.master == pytest.approx(4 * n / 4, rel=0.01)          # float32, split over 4 chips
    assert m.reference == m.master                                 # kl_coef > 0: the anchor is held
    assert m.optimizer == pytest.approx(2 * m.master, rel=0.001)   # AdamW mu and nu
    assert m.sampling_copy == pytest.approx(m.master / 2, rel=0.01)  # bfloat16
    assert m.step == m.sampler == ProgramMemory(0, 0, 0, 0, 0)


@pytest.mark.slow
def test_real_plan_of_a_micro_config(measured):
    run, measurer, base, text = measured
    assert "genenv_jax.tools.tpu_memory: micro on v5litepod-4: 4 chips x 16 GiB HBM" in text
    assert "| update step: batch | 8 x 80, micro-batches 1, remat full | 4 x 80, micro-batches 1, remat full |" in text
    assert "RESULT v5litepod-4: FITS, mesh data=1,fsdp=4,tensor=1" in text
    assert base.fits and base.mesh == (1, 4, 1)
    for m in (base.agent, base.simulator):
        assert m.step.temp > 0 and m.step.args >= m.master + m.optimizer
        assert m.sampler.args >= m.sampling_copy and m.sampler.temp > 0
    assert measurer.sampler.cache_info().misses == 1  # both policies: one sampler compile
    phases = dict(base.phases())
    assert base.peak == max(phases.values())
    key = "agent update: simulator state + agent reference + GRPO step peak"
    assert phases[key] == base.simulator.state + base.agent.reference + base.agent.step.peak


def test_a_config_that_does_not_fit_gets_a_suggestion(measured):
    """HBM just below the agent's update phase: the search re-measures (one more compile) and
    suggests two micro-batches, which fit."""
    run, measurer, base, _ = measured
    phases = dict(base.phases())
    agent_update = phases["agent update: simulator state + agent reference + GRPO step peak"]
    assert agent_update == base.peak  # the phase this test squeezes
    small = plan.Slice("v5litepod-4", 4, (agent_update - 1) / GIB, 1)
    lines: list[str] = []
    plan.report(run, "micro", small, headroom=0.0, measurer=measurer, out=lines.append)
    text = "\n".join(lines)
    assert "RESULT v5litepod-4: DOES NOT FIT" in text
    assert "agent micro_batches=2 remat_policy=full: update phase" in text
    assert "SUGGESTED --config.agent.train.micro_batches=2\n  -> v5litepod-4: FITS" in text


class FakeMeasurer(Measurer):
    """Real resident-state sizes, synthetic programs: the update step needs 0.5 GiB per row per
    device and micro-batch (a quarter with remat full), the sampler 1/4 GiB per slot per device."""

    def __init__(self, run, chips):
        super().__init__(run, chips)
        self.compiles = 0

    @functools.lru_cache(maxsize=None)
    def step(self, name, mesh, micro_batches, remat_policy, shape):
        self.compiles += 1
        rows = shape[0] // (mesh[0] * mesh[1]) // micro_batches  # per device and micro-batch
        temp = rows * GIB // 2 // (4 if remat_policy == "full" else 1)
        return ProgramMemory(args=0, output=0, alias=0, temp=temp, code=0)

    @functools.lru_cache(maxsize=None)
    def sampler(self, cfg, mesh, shape):
        self.compiles += 1
        slots = shape[0] * 4 // (mesh[0] * mesh[1])  # per device, x 4
        return ProgramMemory(args=0, output=0, alias=0, temp=slots * GIB // 16, code=0)


def _fake_report(hbm_gib: float, **overrides) -> tuple[str, FakeMeasurer]:
    c = micro_config()
    c.agent.train.tasks_per_step = 16  # 64 rows: 16 per device
    c.agent.sampling.batch_size = 64
    c.agent.remat_policy = c.simulator.remat_policy = "none"
    for key, value in overrides.items():
        section, field = key.split("__")
        setattr(getattr(c, section), field, value)
    run = plan.load_run_config(c, 4)
    fake = FakeMeasurer(run, 4)
    lines: list[str] = []
    plan.report(run, "fake", plan.Slice("v5litepod-4", 4, hbm_gib, 1), headroom=0.0, measurer=fake,
                out=lines.append)
    return "\n".join(lines), fake


def test_search_picks_the_fewest_micro_batches_and_the_most_slots():
    text, fake = _fake_report(3.0)  # agent: 16 rows per device (8 GiB), 64 slots (4 GiB)
    assert "RESULT v5litepod-4: DOES NOT FIT" in text
    assert "SUGGESTED --config.agent.train.micro_batches=4 --config.agent.sampling.batch_size=32\n" in text
    assert "  -> v5litepod-4: FITS" in text
    assert fake.compiles == 4 + 4 + 3  # the plan; 16 with remat full, then 16, 4, 2; slots 4, 16, 32


def test_search_falls_back_to_full_remat():
    text, _ = _fake_report(0.3)  # 16 micro-batches: 0.5 GiB; with remat full 8 suffice
    assert "--config.agent.train.micro_batches=8" in text
    assert "--config.agent.remat_policy=full" in text and "-> v5litepod-4: FITS" in text


def test_search_that_finds_nothing_names_bigger_slices():
    text, _ = _fake_report(0.1)  # even 16 micro-batches with remat full need 0.125 GiB
    assert "no alternative fits v5litepod-4. Slices whose HBM holds the two policies' state" in text
    text, fake = _fake_report(1e-6)  # the state alone does not fit: nothing is compiled for the search
    assert "the two policies' state alone is" in text and fake.compiles == 4


@pytest.mark.parametrize("args, message", [
    (["--config=bfcl:tiny", "--slice=v9-8"], "genenv_jax.tools.tpu_memory: error: --slice=v9-8: unknown slice 'v9-8'; known: v4-8, "),
    (["--config=bfcl:tiny", "--slice=v5p-8", "--config.agent.nope=1"],
     "genenv_jax.tools.tpu_memory: error: unknown config key"),
    (["--config=bfcl:tiny", "--slice=v5p-8", "--config.mesh.fsdp=3"], "genenv_jax.tools.tpu_memory: error: config.mesh: "),
])
def test_cli_errors_are_one_line(args, message):
    env = subprocess_env()
    proc = subprocess.run([sys.executable, "-m", "genenv_jax.tools.tpu_memory", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(message), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_a_dreamgym_plan_says_the_experience_model_is_not_counted():
    assert plan.unplanned_note(plan.load_run_config(bfcl_multiturn.get_config("7b"), 8)) is None
    c = bfcl_multiturn.get_config("7b")
    c.mode = "dreamgym"
    note = plan.unplanned_note(plan.load_run_config(c, 8))
    assert note.startswith("NOTE mode=dreamgym") and "config.experience: qwen2.5-7b" in note


def test_a_lora_plan_counts_adapters_their_moments_and_one_shared_base():
    """Resident arrays of the 7B preset with rank-16 LoRA on both policies (no compile), and one
    compiled micro-model LoRA plan whose phases count the shared base once."""
    from genenv_jax.models import lora

    c = bfcl.get_config("7b")
    for p in (c.agent, c.simulator):
        p.lora.rank = 16
    run = plan.load_run_config(c, 4)
    measurer = Measurer(run, 4)
    m = measurer.measure("agent", (1, 4, 1), plan.config_knobs(run.agent), with_programs=False)
    cfg = preset("qwen2.5-7b")
    adapters = lora.count_params(cfg, run.agent.lora)
    assert 4 * adapters / 4 <= m.master <= 4 * adapters       # float32 adapters, partly sharded over 4 chips
    assert m.optimizer == pytest.approx(2 * m.master, rel=0.01)  # AdamW moments of the adapters only
    assert m.reference == 0                                      # the base is the KL anchor
    assert m.base == pytest.approx(2 * cfg.num_params() / 4, rel=0.01)  # bfloat16 base, fsdp 4
    assert measurer.shares_base()
    both = plan.build_plan(measurer, (1, 4, 1), plan.config_knobs(run.agent), plan.config_knobs(run.simulator),
                           budget=0, with_programs=False)
    assert both.shared_base == m.base and both.held == 2 * m.state - m.base

    micro = micro_config()
    for p in (micro.agent, micro.simulator):
        p.lora.rank = 4
    run = plan.load_run_config(micro, SMALL.chips)
    lines: list[str] = []
    result = plan.report(run, "micro-lora", SMALL, measurer=Measurer(run, SMALL.chips), out=lines.append)
    text = "\n".join(lines)
    assert "| LoRA: frozen base (param_dtype), one shared |" in text and result.fits
    phases = dict(result.phases())
    a, s = result.agent, result.simulator
    assert phases["agent update: simulator state + agent reference + GRPO step peak"] == \
        s.state - result.shared_base + a.reference + a.step.peak
    assert a.reference == a.master  # bfcl:tiny warm-starts: the KL anchor is a copy of the warm-started adapters
    assert phases["agent sampling: both states + prefix pool + sampler peak"] == \
        a.state + s.state - a.base + a.prefix_pool + a.sampler.peak
    cfg = run.agent.model_config()  # per layer a K and a V [tokens, kv heads, head dim], compute dtype
    assert a.prefix_pool == (run.agent.sampling.prefix_cache_tokens * cfg.num_layers * 2 * cfg.num_kv_heads
                             * cfg.head_dim * np.dtype(cfg.jnp_dtype).itemsize) > 0
    assert a.step.args >= a.master + a.optimizer + a.base  # the base is an argument of the LoRA step
