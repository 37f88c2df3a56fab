"""Per-chip memory of a run config on a TPU slice: `python -m genenv_jax.tools.tpu_memory --config=configs/bfcl.py
--slice=v5p-8 [--config.x=y ...] [--hbm_gib=G] [--headroom=0.1] [--nosearch]`.

For the agent and the simulator: params (float32 master, the float32 reference the KL term reads,
the sampling copy in `param_dtype`; with `lora.rank` > 0 the float32 adapters and the frozen base
in `param_dtype`, held once when both policies share it, which is also the KL reference), optimizer state, the GRPO / RWR update step and the sampler
call (refill and decode programs), compiled only (`genenv_jax.tools.memory_plan`) for the config's mesh,
micro-batches, remat policy and attention kernel on as many virtual CPU devices as the slice has
chips, at the largest shapes the config allows. A run holds both policies' state at all times, so
each phase (an update, a sampler call) is summed with what the rest of the run holds, and the
largest phase is compared with the chips' HBM less a headroom. When it does not fit, the plan
re-measures alternatives (the data axis folded into fsdp, tensor parallelism, more micro-batches,
remat "full", fewer sampler slots) and prints the `--config.` flags of the first that fits. Figures are XLA:CPU buffer
assignment: see docs/plan.md for what they over- and understate. Errors end in one line, exit 2.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from typing import Callable, Sequence

import jax
from absl import flags

from genenv_jax.cli import command, config_flag, die, one_line, run
from genenv_jax.tools.memory_plan import (GIB, Knobs, Measurer, Plan, PlanError, PolicyMemory, build_plan,
                                          config_knobs, set_host_device_count)
from genenv_jax.configs.run_config import ConfigError, RunConfig
from genenv_jax.rl import POLICY_LOSSES

PROGRAM = "genenv_jax.tools.tpu_memory"
_CONFIG = config_flag()
_SLICE = flags.DEFINE_string("slice", None, "TPU slice, e.g. v5p-8, v4-32, v5e-16 (see SLICES).")
_HBM = flags.DEFINE_float("hbm_gib", None, "Override the HBM per chip (GiB), e.g. to ask what a smaller chip allows.")
_HEADROOM = flags.DEFINE_float("headroom", 0.1, "Fraction of HBM kept free (runtime, fragmentation, "
                               "compiler differences); the budget is HBM x (1 - headroom).")
_SEARCH = flags.DEFINE_bool("search", True, "When the config does not fit, re-measure alternatives.")


@dataclasses.dataclass(frozen=True)
class Slice:
    """A TPU slice: chips, HBM per chip (GiB, as Google's system-architecture pages give it), hosts."""

    name: str
    chips: int
    hbm_gib: float
    hosts: int


def _family(prefix: str, hbm: float, sizes: Sequence[tuple[int, int, int]]) -> dict[str, Slice]:
    """Slices of one generation from (name suffix, chips, hosts) triples."""
    return {f"{prefix}-{n}": Slice(f"{prefix}-{n}", chips, hbm, hosts) for n, chips, hosts in sizes}


# v4 / v5p names count TensorCores (2 per chip), v5e / v6e names count chips; 4 chips per host on
# multi-host slices (v5e / v6e single hosts have up to 8).
SLICES: dict[str, Slice] = {
    **_family("v4", 32, [(8, 4, 1), (16, 8, 2), (32, 16, 4), (64, 32, 8), (128, 64, 16)]),
    **_family("v5p", 95, [(8, 4, 1), (16, 8, 2), (32, 16, 4), (64, 32, 8), (128, 64, 16)]),
    **_family("v5litepod", 16, [(1, 1, 1), (4, 4, 1), (8, 8, 1), (16, 16, 4), (32, 32, 8), (64, 64, 16)]),
    **_family("v6e", 32, [(1, 1, 1), (4, 4, 1), (8, 8, 1), (16, 16, 4), (32, 32, 8), (64, 64, 16)]),
}


def find_slice(name: str) -> Slice:
    """The slice named `name` (`v5e-N` is accepted for `v5litepod-N`)."""
    key = name.strip().lower().replace("v5e-", "v5litepod-")
    if key not in SLICES:
        raise PlanError(f"unknown slice {name!r}; known: {', '.join(SLICES)}")
    return SLICES[key]


# ------------------------------------------------------------------------------------------------
# Searching for a plan that fits
# ------------------------------------------------------------------------------------------------
def _smallest_fitting(options: Sequence, fits: Callable[[object], bool]):
    """The first option that fits, assuming fitting is monotone along `options`: the first (the
    config's own, already measured) and the last are tried, then a binary search between them.
    None when even the last does not fit."""
    if not options or fits(options[0]):
        return options[0] if options else None
    if not fits(options[-1]):
        return None
    lo, hi = 0, len(options) - 1  # options[hi] fits
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fits(options[mid]) else (mid + 1, hi)
    return options[hi]


def _micro_options(measurer: Measurer, name: str, shards: int, start: int) -> list[int]:
    """Micro-batch counts from `start` up to one row per device per micro-batch, powers of two; the
    agent's must divide its rows per device (run_config checks GRPO rows)."""
    p = measurer.policy(name)
    grouped = POLICY_LOSSES.get(p.rule).grouped  # rows are tasks x rollouts, checked by run_config
    rows = p.train.tasks_per_step * (measurer.run.rollouts_per_task if grouped else 1)
    per_device = -(-rows // shards)
    options, m = [], start
    while m <= per_device:
        if not grouped or rows % (shards * m) == 0:
            options.append(m)
        m *= 2
    return options or [start]


def mesh_options(mesh: tuple[int, int, int], chips: int) -> list[tuple[int, int, int]]:
    """Meshes the search tries, in order: the config's, the data axis folded into fsdp, then tensor
    parallelism 2, 4, 8 over the rest as fsdp (the sampler then need not gather whole weights)."""
    data, fsdp, tensor = mesh
    out = [mesh, (1, data * fsdp, tensor)]
    out += [(1, chips // t, t) for t in (2, 4, 8) if t <= chips and chips % t == 0]
    return list(dict.fromkeys(out))


def search(measurer: Measurer, base: Plan, log: list[str]) -> Plan | None:
    """The first plan that fits (meshes in `mesh_options` order; per mesh each policy's update,
    then sampler settings), or None; `log` gets one line per alternative measured."""
    for mesh in mesh_options(base.mesh, len(measurer.devices)):
        plan = build_plan(measurer, mesh, base.agent.knobs, base.simulator.knobs, base.budget, with_programs=False)
        held = plan.held
        if held > base.budget:
            log.append(f"mesh {_mesh_text(mesh)}: the two policies' state alone is {held / GIB:.2f} GiB per chip")
            continue
        chosen: dict[str, Knobs] = {}
        for name, other in (("agent", plan.simulator), ("simulator", plan.agent)):
            knobs = _fit_policy(measurer, name, mesh, getattr(base, name).knobs, other.state - plan.shared_base,
                                base.budget, log)
            if knobs is None:
                break
            chosen[name] = knobs
        else:
            return build_plan(measurer, mesh, chosen["agent"], chosen["simulator"], base.budget)
    return None


def _fit_policy(measurer: Measurer, name: str, mesh, knobs: Knobs, other_state: int, budget: int,
                log: list[str]) -> Knobs | None:
    """Knobs under which the policy's update and sampler phases fit (fewest micro-batches, the
    config's remat policy before "full", most sampler slots), or None."""
    shards, seen = mesh[0] * mesh[1], {}

    def fits(k: Knobs, phase: str) -> bool:
        if (k, phase) not in seen:
            m = measurer.measure(name, mesh, k)
            total = (other_state + m.reference + m.step.peak if phase == "update"
                     else other_state + m.state + m.sampler.peak)
            what = (f"micro_batches={k.micro_batches} remat_policy={k.remat_policy}" if phase == "update"
                    else f"sampling.batch_size={k.slots}")
            log.append(f"mesh {_mesh_text(mesh)}, {name} {what}: {phase} phase {total / GIB:.2f} GiB")
            seen[k, phase] = total <= budget
        return seen[k, phase]

    micro = _micro_options(measurer, name, shards, knobs.micro_batches)
    if not fits(knobs, "update"):
        if not fits(dataclasses.replace(knobs, micro_batches=micro[-1], remat_policy="full"), "update"):
            return None  # the least memory these knobs give
        for remat in dict.fromkeys([knobs.remat_policy, "full"]):
            options = [dataclasses.replace(knobs, micro_batches=m, remat_policy=remat) for m in micro]
            found = _smallest_fitting(options, lambda k: fits(k, "update"))
            if found:
                knobs = found
                break
    slots = [knobs.slots >> i for i in range(16) if (knobs.slots >> i) >= shards]
    return _smallest_fitting([dataclasses.replace(knobs, slots=s) for s in slots], lambda k: fits(k, "sampling"))


def bigger_slices(plan: Plan, current: Slice, headroom: float) -> list[str]:
    """The smallest slice of each generation with more HBM than `current` that could hold the two
    policies' state (an estimate: state split evenly over the chips, nothing else counted)."""
    replica = plan.held * current.chips / plan.mesh[0] / GIB
    out: dict[str, str] = {}
    for s in sorted(SLICES.values(), key=lambda s: s.chips):
        family = s.name.rsplit("-", 1)[0]
        if (family not in out and s.chips * s.hbm_gib > current.chips * current.hbm_gib
                and replica / s.chips < s.hbm_gib * (1 - headroom)):
            out[family] = s.name
    return list(out.values())


# ------------------------------------------------------------------------------------------------
# Report
# ------------------------------------------------------------------------------------------------
def _mesh_text(mesh: tuple[int, int, int]) -> str:
    """"data=1,fsdp=4,tensor=1"."""
    return ",".join(f"{k}={v}" for k, v in zip(("data", "fsdp", "tensor"), mesh))


def _g(n: int) -> str:
    """Bytes as GiB with two decimals."""
    return f"{n / GIB:.2f}"


def policy_table(plan: Plan) -> str:
    """Markdown table: one column per policy, one row per resident array or program."""
    a, s = plan.agent, plan.simulator

    def row(label: str, fn) -> str:
        return f"| {label} | {fn(a)} | {fn(s)} |"

    def step_text(m: PolicyMemory) -> str:
        return (f"{m.step_shape[0]} x {m.step_shape[1]}, micro-batches {m.knobs.micro_batches}, "
                f"remat {m.knobs.remat_policy}")

    rows = ["| per chip, GiB | agent (GRPO) | simulator (RWR) |", "|---|---|---|",
            row("trained: float32 master params or LoRA adapters", lambda m: _g(m.master)),
            row("float32 reference (KL anchor; LoRA: the base, no copy)", lambda m: _g(m.reference)),
            row("optimizer state (AdamW, float32)", lambda m: _g(m.optimizer)),
            row("LoRA: frozen base (param_dtype)" + (", one shared" if plan.shared_base else ""),
                lambda m: _g(m.base)),
            row("state held all run (sum of the four)", lambda m: _g(m.state)),
            row("params: sampling copy (during its sampler calls)", lambda m: _g(m.sampling_copy)),
            row("sampler prefix pool (during its sampler calls)", lambda m: _g(m.prefix_pool)),
            row("update step: batch", step_text),
            row("update step: temp / peak", lambda m: f"{_g(m.step.temp)} / {_g(m.step.peak)}"),
            row("sampler call: slots x (prompt + new tokens)",
                lambda m: f"{m.sampler_shape[0]} x ({m.sampler_shape[1]} + {m.sampler_shape[2]})"),
            row("sampler: temp / peak (larger of refill, decode)",
                lambda m: f"{_g(m.sampler.temp)} / {_g(m.sampler.peak)}")]
    return "\n".join(rows)


def phase_table(plan: Plan) -> str:
    """Markdown table: each phase's bytes per chip against the budget."""
    rows = ["| phase (held at once, per chip) | GiB | fits |", "|---|---|---|"]
    rows += [f"| {name} | {_g(b)} | {'yes' if b <= plan.budget else 'no'} |" for name, b in plan.phases()]
    return "\n".join(rows)


def verdict(plan: Plan, slice_: Slice) -> str:
    """One line: FITS or DOES NOT FIT, the mesh, the largest phase and the budget."""
    word = "FITS" if plan.fits else "DOES NOT FIT"
    return (f"{slice_.name}: {word}, mesh {_mesh_text(plan.mesh)}: largest phase {_g(plan.peak)} GiB per chip, "
            f"budget {_g(plan.budget)} GiB")


def unplanned_note(run: RunConfig) -> str | None:
    """A line naming what the run holds beside the two policies that this plan does not count
    (mode=dreamgym's experience model), else None."""
    if run.mode != "dreamgym":
        return None
    e = run.experience
    return (f"NOTE mode=dreamgym: this plan counts the agent and the simulator only; the experience model "
            f"(config.experience: {e.model_dir or e.preset}) is a third policy on the same chips (params, SFT "
            "optimizer state, sampler cache): leave room for it")


def report(run: RunConfig, config_name: str, slice_: Slice, headroom: float = 0.1, search_on: bool = True,
           measurer: Measurer | None = None, out=print) -> Plan:
    """Measures the config's plan on `slice_`, prints it, and when it does not fit searches for one
    that does; returns the config's own plan."""
    measurer = measurer or Measurer(run, slice_.chips)
    mesh = run.mesh.resolve(slice_.chips)
    budget = int(slice_.hbm_gib * (1 - headroom) * GIB)
    kernels = {p.attention for p in (run.agent, run.simulator)}
    out(f"{PROGRAM}: {config_name} on {slice_.name}: {slice_.chips} chips x {slice_.hbm_gib:g} GiB HBM, "
        f"{slice_.hosts} host(s); mesh {_mesh_text(mesh)}; budget {_g(budget)} GiB per chip "
        f"(headroom {headroom:.0%})")
    out(f"compile-only on XLA:{jax.default_backend().upper()}, {slice_.chips} virtual devices, jax {jax.__version__}; "
        f"attention {'/'.join(sorted(kernels))}" + (" (blockwise on CPU)" if "auto" in kernels else "")
        + "; models " + "/".join(sorted({p.model_dir or p.preset for p in (run.agent, run.simulator)})))
    if unplanned_note(run):
        out(unplanned_note(run))
    plan = build_plan(measurer, mesh, config_knobs(run.agent), config_knobs(run.simulator), budget)
    out("\n" + policy_table(plan) + "\n\n" + phase_table(plan) + "\n")
    out("RESULT " + verdict(plan, slice_))
    if plan.fits or not search_on:
        return plan
    log: list[str] = []
    found = search(measurer, plan, log)
    out("\nalternatives tried:\n" + "\n".join(f"  {line}" for line in log))
    if found is None:
        out(f"no alternative fits {slice_.name}. Slices whose HBM holds the two policies' state (estimate; "
            f"plan them to check): {', '.join(bigger_slices(plan, slice_, headroom)) or 'none in the table'}")
        return plan
    flags_ = [f"--config.mesh.{k}={v}" for k, v, b in zip(("data", "fsdp", "tensor"), found.mesh, plan.mesh) if v != b]
    flags_ += found.agent.knobs.flags("agent", plan.agent.knobs)
    flags_ += found.simulator.knobs.flags("simulator", plan.simulator.knobs)
    out("\n" + policy_table(found) + "\n\n" + phase_table(found) + "\n")
    out("SUGGESTED " + " ".join(flags_) + "\n  -> " + verdict(found, slice_))
    return plan


# ------------------------------------------------------------------------------------------------
# Command line
# ------------------------------------------------------------------------------------------------
def _die(message: str) -> None:
    die(message, PROGRAM)


def load_run_config(config, chips: int) -> RunConfig:
    """The validated RunConfig; the plan never loads weights, so large presets need no
    `allow_random_init` (a `model_dir` must still resolve: its config gives the shapes)."""
    try:
        tree = config.to_dict()
    except OSError as e:  # ml_collections reports a config file it could not load on first use
        raise PlanError(f"cannot load the config: {one_line(e)}") from None
    for name in ("agent", "simulator"):
        tree[name]["allow_random_init"] = True
    return RunConfig.from_config_dict(tree, num_devices=chips)


@command(PROGRAM)
def main(argv: list[str]) -> None:
    """Checks the flags, sets up the virtual CPU devices, validates the config and reports."""
    if len(argv) > 1:
        _die(f"unexpected arguments: {argv[1:]}")
    if _CONFIG.value is None or _SLICE.value is None:
        _die("--config and --slice are required, e.g. --config=configs/bfcl.py --slice=v5p-8")
    try:
        try:
            slice_ = find_slice(_SLICE.value)
        except PlanError as e:
            raise PlanError(f"--slice={_SLICE.value}: {e}") from None
        if not 0 <= _HEADROOM.value < 1:
            raise PlanError(f"--headroom={_HEADROOM.value} must lie in [0, 1)")
        if _HBM.value is not None and not 0 < _HBM.value < math.inf:  # inf: a budget no int can hold
            raise PlanError(f"--hbm_gib={_HBM.value} must be a finite number > 0")
        set_host_device_count(slice_.chips)  # both before JAX's first device query
        jax.config.update("jax_platforms", "cpu")
        run = load_run_config(_CONFIG.value, slice_.chips)
        name = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--config=")), "config")
        if _HBM.value is not None:
            slice_ = dataclasses.replace(slice_, hbm_gib=_HBM.value)
        report(run, name, slice_, _HEADROOM.value, _SEARCH.value)
    except (ConfigError, PlanError) as e:
        _die(one_line(e))


if __name__ == "__main__":
    run(main, PROGRAM)
