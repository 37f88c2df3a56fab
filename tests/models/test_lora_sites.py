"""LoRA is a partition of the weights (`models.partition`), not a mode of every layer: code outside
models/lora.py that names it (an identifier with `lora`, `adapters`, `adapter_` or
`AdapterPartition`; comments and strings do not count) stays where it is a feature of its own.

- The path a training step, a policy state, a checkpoint and the sampler go through (the model
  maths, rl, sampling, loop, workdir, parallel, episodes, tools, reading a run's policy back)
  names LoRA at most 10 times: the primitives' one hook for an adapter's delta and the model
  config's delta scale. Before the partition it named LoRA on 109 lines in 13 files.
- The rest are LoRA's own features: its config section and the presets that set it, PEFT's adapter
  file format (models/peft_io.py), evaluating a PEFT adapter directory (`--adapter_dir`) and
  exporting one (`--format=peft`). A new file that starts naming LoRA fails here."""

import io
import re
import tokenize
from collections import Counter
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "genenv_jax"
NAMES = re.compile(r"lora|adapters|adapter_|AdapterPartition", re.IGNORECASE)
# LoRA's own features and its config: the files allowed to name it beyond the core's budget.
FEATURES = {"configs/base.py", "configs/bfcl.py", "configs/calc.py", "configs/experience_settings.py",
            "configs/run_config.py", "configs/settings.py", "evaluation/cli.py", "export/cli.py",
            "export/policy_formats.py", "models/peft_io.py"}
CORE_BUDGET = 10


def lora_sites() -> dict[str, list[int]]:
    """file (relative to the package) -> the code lines that name LoRA, outside models/lora.py."""
    sites: dict[str, list[int]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(PACKAGE).as_posix()
        if name == "models/lora.py":
            continue
        lines = sorted({tok.start[0] for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
                        if tok.type == tokenize.NAME and NAMES.search(tok.string)})
        if lines:
            sites[name] = lines
    return sites


def test_the_training_and_sampling_path_names_lora_at_most_ten_times():
    sites = lora_sites()
    core = {name: lines for name, lines in sites.items() if name not in FEATURES}
    where = ", ".join(f"{name}:{','.join(map(str, lines))}" for name, lines in core.items())
    assert sum(len(lines) for lines in core.values()) <= CORE_BUDGET, where
    assert set(core) <= {"models/primitives.py", "models/config.py"}, where


def test_only_loras_own_features_name_it_elsewhere():
    sites = lora_sites()
    assert set(sites) - {"models/primitives.py", "models/config.py"} <= FEATURES, sorted(sites)
    per_file = Counter({name: len(lines) for name, lines in sites.items()})
    assert per_file["models/peft_io.py"] > 0 and per_file["configs/settings.py"] > 0  # the counter sees names
