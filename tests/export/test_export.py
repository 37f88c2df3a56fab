"""`python -m genenv_jax.export`: a run's policies out as GGUF, HF and PEFT, each read back by an
independent loader, and the simulator's tasks as a dataset that `datasets` and bfcl-eval read.

The runs are written as the loop writes them (`loop.persistence.save_state`, `Pool.append_epoch`
of `loop.records.d_env_records`), with a tiny random Qwen2 over a tiny byte-level BPE tokenizer
(tests/support/gguf_files.py), so no loop has to run: one full fine-tuning BFCL run (distinct agent and
simulator weights, three D_env shards of which the checkpoint lists two) and one LoRA run (agent
and simulator adapters over one base HF directory).
"""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
gguf = pytest.importorskip("gguf")

from genenv_jax.configs.run_config import RunConfig  # noqa: E402
from genenv_jax.export.cli import main  # noqa: E402
from genenv_jax.models import forward, load_gguf, load_hf  # noqa: E402
from genenv_jax.models import lora as lora_lib  # noqa: E402
from genenv_jax.text.gguf_tokenizer import gguf_tokenizer  # noqa: E402
from genenv_jax.workdir.checkpoint_digests import tree_digest  # noqa: E402
from tests.support.hf_reference import make_hf_model, save_hf_model  # noqa: E402
from tests.support.loop_configs import toy_config_dict  # noqa: E402
from tests.support.gguf_files import write_tiny_gguf  # noqa: E402

TEXT = "Get the weather in the city <tool_call> then call the function"
TOKENS = np.random.RandomState(0).randint(3, 300, (2, 9))


def _random_like(tree, seed, std, around=None):
    """normal(0, std) leaves shaped like `tree` (+ `around`'s values), drawn in numpy: no compiles."""
    rng = np.random.RandomState(seed)
    noise = jax.tree.map(lambda x: jnp.asarray(rng.normal(0.0, std, x.shape), jnp.float32), tree)
    return noise if around is None else jax.tree.map(jnp.add, around, noise)


def _save_run(workdir, config, epoch, arrays, bases=None, pools=None):
    from genenv_jax.loop.persistence import save_state
    from genenv_jax.loop.state import LoopState
    from genenv_jax.rl.batches import PolicyState
    from genenv_jax.workdir.checkpoints import Checkpointer

    state = LoopState(epoch=epoch, agent=PolicyState(arrays["agent"], None), bases=bases or {},
                      simulator=PolicyState(arrays["simulator"], None))
    with Checkpointer(workdir / "checkpoints", async_save=False) as ckpt:
        save_state(ckpt, state, pools or {}, config)


def _bfcl_records(domain, epoch):
    """D_env records of real BFCL variants (the domain's own parse of a sibling written as the
    simulator writes one) with curriculum numbers."""
    from genenv_jax.loop import epoch_tasks
    from genenv_jax.loop.records import d_env_records
    from genenv_jax.loop.tasks import Generation
    from genenv_jax.rl.curriculum import TaskScore

    seeds = {s.category: s for s in domain.seeds("train")}
    tasks = []
    for i, category in enumerate(("simple_python", "multiple", "parallel", "irrelevance")):
        seed = seeds[category]
        text = domain.reference_generation(seed)
        task = domain.parse_task(text, seed, "harder")
        p_hat = (i + epoch) % 3 / 2
        score = TaskScore(task.task_id, seed.task_id, 2, p_hat, 0.25, p_hat, 1 - abs(p_hat - 0.5), p_hat == 0.5)
        tasks.append(epoch_tasks.EpochTask(epoch_tasks.GENERATED, task,
                                           Generation(seed, "harder", [], [], np.zeros(0), text, task), score=score))
    return d_env_records(tasks, reward_lambda=1.0)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from genenv_jax.domains import get_domain
    from genenv_jax.workdir.pools import Pool

    root = tmp_path_factory.mktemp("export")
    tokenizer = gguf_tokenizer(write_tiny_gguf(root / "vocab.gguf"))  # 320-token byte-level BPE
    base_dir = save_hf_model(make_hf_model(vocab=320, hidden=64, intermediate=80, std=0.1), root / "base")
    tokenizer.save_pretrained(base_dir)  # the run's tokenizer: its model source's own
    cfg, base = load_hf(base_dir)
    policy = {"agent.model_dir": base_dir, "agent.preset": "", "simulator.preset": "", "domain.name": "bfcl",
              "domain.options": {}, "tokenizer_dir": ""}  # the run's tokenizer: the base's own

    full_config = RunConfig.from_config_dict(toy_config_dict(**policy))
    full = {"agent": _random_like(base, 1, 0.05, base), "simulator": _random_like(base, 2, 0.05, base)}
    pool = Pool(root / "full" / "pools", "d_env")
    domain = get_domain("bfcl")
    records = {epoch: _bfcl_records(domain, epoch) for epoch in (0, 1, 2)}
    for epoch in (0, 1):
        pool.append_epoch(epoch, records[epoch])
    _save_run(root / "full", full_config, 1, full, pools={"d_env": pool})
    pool.append_epoch(2, records[2])  # past the checkpoint: a resume drops it, so must the export

    lora = {f"{p}.lora.{k}": v for p in ("agent", "simulator") for k, v in (("rank", 4), ("alpha", 8.0))}
    lora_config = RunConfig.from_config_dict(toy_config_dict(**policy, **lora))
    settings = lora_config.agent.lora
    adapters = {name: _random_like(lora_lib.adapter_shapes(cfg, settings), seed=i + 3, std=0.2)
                for i, name in enumerate(("agent", "simulator"))}  # B random too: the deltas are not zero
    record = {"digest": tree_digest(base), "source": base_dir, "dtype": "float32"}
    _save_run(root / "lora", lora_config, 0, adapters, bases={"agent": record, "simulator": record})
    merged = {name: lora_lib.merge(base, a, settings.scale) for name, a in adapters.items()}
    return {"root": root, "cfg": cfg, "base_dir": base_dir, "tokenizer": tokenizer, "full": full, "merged": merged,
            "records": records}


def _export(runs, run, *flags, out):
    path = runs["root"] / out
    assert main([f"--run_dir={runs['root'] / run}", *flags, f"--out={path}"]) == 0
    return path


def _logits(cfg, params):
    return np.asarray(forward(cfg, params, jnp.asarray(TOKENS)))


def _hf_logits(directory, **kwargs):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(directory), dtype=torch.float32, **kwargs).eval()
    with torch.no_grad():
        return model(torch.tensor(TOKENS)).logits.float().numpy()


def _assert_leaves(expected, got, how):
    for (path, a), b in zip(jax.tree_util.tree_flatten_with_path(expected)[0], jax.tree.leaves(got)):
        how(jax.tree_util.keystr(path), np.asarray(a, np.float32), np.asarray(b, np.float32))


@pytest.mark.slow
def test_gguf_f32_reads_back_exactly_and_transformers_gives_our_logits(runs):
    out = _export(runs, "full", "--policy=agent", "--format=gguf", "--gguf_type=f32", out="agent-f32")
    cfg, params = load_gguf(out / "model.gguf")
    _assert_leaves(runs["full"]["agent"], params, lambda path, a, b: np.testing.assert_array_equal(a, b, path))
    ours = _logits(runs["cfg"], runs["full"]["agent"])
    np.testing.assert_allclose(_hf_logits(out, gguf_file="model.gguf"), ours, atol=1e-4, rtol=0)
    tok = gguf_tokenizer(out / "model.gguf")  # transformers builds it from the file's tokens and merges
    assert tok.encode(TEXT) == runs["tokenizer"].encode(TEXT)
    assert tok.chat_template == runs["tokenizer"].chat_template
    fields = gguf.GGUFReader(str(out / "model.gguf")).fields
    assert bytes(fields["tokenizer.ggml.pre"].parts[-1]).decode() == "qwen2"
    assert json.loads((out / "export.json").read_text())["epoch"] == 1


def test_gguf_f16_of_the_simulator_within_f16_rounding(runs):
    out = _export(runs, "full", "--policy=simulator", "--format=gguf", out="simulator-f16")
    _, params = load_gguf(out / "model.gguf")
    expected = runs["full"]["simulator"]

    def rounded(path, a, b):  # matrices as float16, norm scales and biases kept in float32
        kept = path.endswith(("bias']", "scale']"))
        np.testing.assert_array_equal(b, a if kept else a.astype(np.float16).astype(np.float32), path)
    _assert_leaves(expected, params, rounded)
    assert not np.array_equal(np.asarray(params["embed"]["embedding"]),  # the simulator, not the agent
                              np.asarray(runs["full"]["agent"]["embed"]["embedding"], np.float16).astype(np.float32))
    ours = _logits(runs["cfg"], expected)
    np.testing.assert_allclose(_hf_logits(out, gguf_file="model.gguf"), ours, atol=2e-2, rtol=0)


@pytest.mark.parametrize("gguf_type", ["f32", "f16"])
def test_llama_cpp_decodes_the_exported_file_greedily_as_we_do(runs, gguf_type):
    """llama.cpp itself (node-llama-cpp's prebuilt CPU binary; `make llamacpp`) reads the exported
    file and greedy-decodes 32 tokens after each of 4 prompts: the same tokens as our sampler on the
    params our loader reads from the same file (F32 KV cache and no flash attention on its side, so
    both compute the same attention; export/llamacpp.py), or tokens that part only at a near-tie."""
    from genenv_jax.evaluation.evaluate import make_generate_fn
    from genenv_jax.export import llamacpp

    reason = llamacpp.unavailable_reason()
    if reason:
        pytest.skip(reason)
    out = _export(runs, "full", "--policy=agent", "--format=gguf", f"--gguf_type={gguf_type}",
                  out=f"agent-llamacpp-{gguf_type}")
    cfg, params = load_gguf(out / "model.gguf")
    prompts = [[int(t) for t in np.random.RandomState(i).randint(3, 300, n)] for i, n in enumerate((5, 9, 13, 17))]
    ours = make_generate_fn(cfg, params, [], 0, len(prompts))(prompts, 32)
    theirs = llamacpp.greedy(out / "model.gguf", prompts, 32)
    for prompt, a, b in zip(prompts, ours, theirs):
        # Equal tokens, or parted only at a near-tie of ours (this random tiny model's top-2 logits
        # along these continuations come within 6e-5 of each other), where llama.cpp took our
        # runner-up: summation order alone (its kernels, our BLAS, the CPU) can flip such a tie.
        k = llamacpp.first_difference(a, b)
        if k is not None:
            runner_up, margin = llamacpp.second_choice(cfg, params, prompt, a[:k])
            assert b[k] == runner_up and margin < 1e-3, \
                f"llama.cpp parted from our greedy tokens at {k} of {prompt}: ours {a}, llama.cpp {b}"


@pytest.mark.slow
def test_gguf_q8_0_of_a_lora_agent_is_the_packages_quantisation_of_the_merged_weights(runs):
    from genenv_jax.evaluation.run_policy import load_run_policy
    from genenv_jax.export.gguf_writer import gguf_names
    from genenv_jax.models.gguf_io import GGUFTensorReader
    from genenv_jax.models.hf_io import hf_tensors

    out = _export(runs, "lora", "--policy=agent", "--format=gguf", "--gguf_type=q8_0", out="agent-q8")
    reader = GGUFTensorReader(out / "model.gguf")
    cfg = runs["cfg"]
    names = gguf_names(cfg)
    assert names["model.layers.1.self_attn.q_proj.bias"] == "blk.1.attn_q.bias"
    # The merged weights as the export computes them (one jitted merge, FSDP-sharded over the
    # default mesh): the same program on the same restored arrays, so the quantisation below is
    # compared bit for bit. The fixture's merge (eager, one device) is another program, whose
    # A @ B sums may run in another order on another CPU: equal to float32 rounding only.
    merged = load_run_policy(runs["root"] / "lora", "agent").merged()
    _assert_leaves(runs["merged"]["agent"], merged,
                   lambda path, a, b: np.testing.assert_allclose(b, a, atol=1e-6, rtol=1e-6, err_msg=path))
    for hf, values in hf_tensors(cfg, merged):
        stored, back = reader.stored_type(hf), reader.read(hf)
        if values.ndim == 1:
            assert stored == "F32"
            np.testing.assert_array_equal(back, values, hf)
        elif values.shape[-1] % 32:  # rows Q8_0 blocks cannot cover: F16, as llama.cpp falls back
            assert stored == "F16" and hf.endswith("down_proj.weight")
            np.testing.assert_array_equal(back, values.astype(np.float16).astype(np.float32), hf)
        else:
            assert stored == "Q8_0"
            exact = gguf.quants.dequantize(gguf.quants.quantize(values, gguf.GGMLQuantizationType.Q8_0),
                                           gguf.GGMLQuantizationType.Q8_0)
            np.testing.assert_array_equal(back, exact.reshape(values.shape), hf)
            step = np.abs(values).reshape(-1, 32).max(axis=1, keepdims=True) / 127  # a block's scale
            # half a step, plus what the float16 rounding of the scale moves 127 steps
            assert (np.abs(back - values).reshape(-1, 32) <= step * (0.5 + 127 / 2048)).all(), hf
    assert reader.field("general.file_type") == int(gguf.LlamaFileType.MOSTLY_Q8_0)


def test_hf_export_of_a_lora_agent_loads_in_transformers_with_our_merged_logits(runs):
    from transformers import AutoTokenizer

    out = _export(runs, "lora", "--policy=agent", "--format=hf", out="agent-hf")
    ours = _logits(runs["cfg"], runs["merged"]["agent"])
    np.testing.assert_allclose(_hf_logits(out), ours, atol=1e-5, rtol=0)
    assert np.abs(ours - _logits(runs["cfg"], load_hf(runs["base_dir"])[1])).max() > 1e-2  # adapters matter
    tok = AutoTokenizer.from_pretrained(str(out))
    assert tok.encode(TEXT) == runs["tokenizer"].encode(TEXT) and tok.chat_template
    summary = json.loads((out / "export.json").read_text())
    assert summary["lora"]["merged"] and summary["format"] == "hf"


def test_peft_export_of_the_simulator_loads_over_the_hf_base_with_our_logits(runs):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    out = _export(runs, "lora", "--policy=simulator", "--format=peft", out="simulator-peft")
    assert json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"] == runs["base_dir"]
    base = AutoModelForCausalLM.from_pretrained(runs["base_dir"], dtype=torch.float32).eval()
    model = PeftModel.from_pretrained(base, str(out)).eval()
    with torch.no_grad():
        theirs = model(torch.tensor(TOKENS)).logits.float().numpy()
    np.testing.assert_allclose(theirs, _logits(runs["cfg"], runs["merged"]["simulator"]), atol=1e-5, rtol=0)


def _import_datasets():
    """`datasets` (imported lazily: the Parquet tests are the only users)."""
    import datasets

    return datasets


def test_tasks_load_with_datasets_and_bfcl_eval_scores_them(runs, tmp_path):
    from bfcl_eval.utils import extract_test_category_from_id, load_file

    from genenv_jax.domains.bfcl.checker import check_calls
    from genenv_jax.domains.bfcl.schema import reference_calls

    out = _export(runs, "full", "--tasks", out="tasks")
    rows = _import_datasets().load_dataset("parquet", data_files=str(out / "tasks.parquet"), split="train",
                                 cache_dir=str(tmp_path))
    expected = runs["records"][0] + runs["records"][1]  # epoch 2 is past the checkpoint
    assert len(rows) == len(expected) == 8
    assert [r["epoch"] for r in rows] == [0] * 4 + [1] * 4 and set(rows["mode"]) == {"genenv"}
    for row, record in zip(rows, expected):
        assert row["task_id"] == record["task"]["task_id"] and row["generation"] == record["generation"]
        assert (row["p_hat"], row["r_env"], row["in_band"], row["weight"]) == \
            (record["p_hat"], record["r_env"], record["in_band"], record["weight"])
        assert json.loads(row["verifier"]) == record["task"]["verifier"]
        assert json.loads(row["prompt"]) == record["task"]["prompt"]

    scored = 0
    for row in rows:
        category = extract_test_category_from_id(row["bfcl_id"])
        assert category == row["category"]
        question = next(e for e in load_file(out / "bfcl" / f"BFCL_v4_{category}.json", use_lock=False)
                        if e["id"] == row["bfcl_id"])
        assert question["question"] == [json.loads(row["prompt"])["question"]]
        if category == "irrelevance":
            assert not (out / "bfcl" / "possible_answer" / f"BFCL_v4_{category}.json").exists()
            continue
        answer = next(e for e in load_file(out / "bfcl" / "possible_answer" / f"BFCL_v4_{category}.json",
                                           use_lock=False) if e["id"] == row["bfcl_id"])
        right = reference_calls(question["function"], answer["ground_truth"])
        assert check_calls(question["function"], right, answer["ground_truth"], category).valid
        wrong = [{"name": c.name + "_other", "arguments": c.arguments} for c in right]
        assert not check_calls(question["function"], wrong, answer["ground_truth"], category).valid
        scored += 1
    assert scored == 6


@pytest.mark.parametrize("flags, out, message", [
    (["--policy=agent", "--format=peft"], "peft-full", "--format=peft: the agent was fine-tuned fully"),
    (["--policy=agent", "--format=hf"], "full/inside", "lies inside an input (--run_dir"),
    (["--policy=agent", "--format=hf"], "base/x", "lies inside an input (the agent's model source"),
    (["--policy=agent", "--format=hf"], "occupied", "exists and is not empty"),
    (["--policy=agent", "--format=hf", "--gguf_type=f32"], "o1", "--gguf_type goes with --format=gguf"),
    (["--tasks", "--format=hf"], "o2", "--tasks exports the run's task pool"),
    (["--policy=agent"], "o3", "--policy needs --format"),
    (["--policy=agent", "--format=hf", "--epoch=7"], "o4", "--epoch=7: "),
])
def test_refusals_are_one_line_before_any_work(runs, capsys, flags, out, message):
    (runs["root"] / "occupied").mkdir(exist_ok=True)
    (runs["root"] / "occupied" / "keep.txt").write_text("x")
    assert main([f"--run_dir={runs['root'] / 'full'}", *flags, f"--out={runs['root'] / out}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("genenv_jax.export: error: ") and message in err and "\n" not in err
    assert not (runs["root"] / out).exists() or out == "occupied"


def test_gguf_tokenizer_fields_pad_to_the_embedding_and_refuse_other_tokenizers(runs):
    """Tokens past the tokenizer's are unused `[PADi]` rows; more tokens than rows, or the study's
    kind of tokenizer (`text/small_tokenizer.py`: a BPE over SentencePiece pieces with byte fallback
    and a "▁" decoder, which llama.cpp would decode wrongly as gpt2 byte-level BPE), are refused."""
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    from genenv_jax.export.gguf_writer import tokenizer_fields

    fields = tokenizer_fields(runs["tokenizer"], 330)
    assert fields["tokens"][:320] == runs["tokenizer"].convert_ids_to_tokens(list(range(320)))
    assert fields["tokens"][320:] == [f"[PAD{i}]" for i in range(320, 330)]
    assert set(fields["types"][320:]) == {int(gguf.TokenType.UNUSED)}
    assert fields["types"][fields["tokens"].index("<|im_end|>")] == int(gguf.TokenType.CONTROL)
    with pytest.raises(ValueError, match="has 320 tokens but the model's embedding only 300 rows"):
        tokenizer_fields(runs["tokenizer"], 300)
    spm = Tokenizer(models.BPE(vocab={"<unk>": 0, "a": 1, "b": 2, "ab": 3}, merges=[("a", "b")],
                               byte_fallback=True, unk_token="<unk>"))
    spm.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback()])
    with pytest.raises(ValueError, match="not a byte-level BPE"):
        tokenizer_fields(PreTrainedTokenizerFast(tokenizer_object=spm), 8)


@pytest.mark.slow
def test_gguf_of_a_qwen25_vocabulary_model_carries_the_qwen25_tokenizer(tmp_path):
    """With Qwen2.5's own tokenizer (151,665 tokens in 151,936 embedding rows): our reader knows the
    file's vocabulary as the bundled one, and transformers' GGUF tokenizer encodes and renders chat
    like it."""
    from transformers import AutoTokenizer

    from genenv_jax.export.gguf_writer import write_gguf
    from genenv_jax.models import init_params, preset
    from genenv_jax.text.gguf_tokenizer import GGUFFields, matches_bundled_vocabulary
    from genenv_jax.text.tokenization import load_tokenizer

    cfg = preset("tiny", param_dtype="float32", dtype="float32")
    tok = load_tokenizer()
    path = write_gguf(cfg, init_params(cfg, jax.random.key(0)), tok, tmp_path / "tiny.gguf", "q8_0")
    assert matches_bundled_vocabulary(GGUFFields(path))
    theirs = AutoTokenizer.from_pretrained(str(tmp_path), gguf_file="tiny.gguf")
    text = 'Hello <tool_call>{"name": "f"}</tool_call> 你好 <|im_end|>'
    assert theirs.encode(text) == tok.encode(text)
    messages = [{"role": "user", "content": "hi"}]
    assert theirs.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == \
        tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
