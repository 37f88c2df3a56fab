"""benchmarks/bfcl_published.py: our two BFCL runs (fc, prompting) beside the published figures."""

import importlib.util
import json

import pytest

from tests.support import REPO


def _script():
    spec = importlib.util.spec_from_file_location("_bfcl_published", REPO / "benchmarks" / "bfcl_published.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(path, mode, items):
    path.mkdir(parents=True)
    config = {"model_dir": "M", "domain_options": {"mode": mode, "prompt_format": f"bfcl_{mode}_qwen25",
                                                   "decoding": "bfcl"}}
    (path / "results.json").write_text(json.dumps({"config": config}))
    (path / "items.jsonl").write_text("".join(json.dumps(dict(zip(("task_id", "category", "reward", "response",
                                                                     "error_type"), it))) + "\n" for it in items))
    return path


FC = [("simple_python_1", "simple_python", 1.0, '<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>', None),
      ("simple_python_2", "simple_python", 0.0, '```json\n{"name": "f", "arguments": {}}\n```',
       "simple_function_checker:wrong_count"),
      ("irrelevance_1", "irrelevance", 1.0, "I cannot help with that.", None)]
PROMPTING = [("simple_python_1", "simple_python", 1.0, "[f(a=1)]", None),
             ("simple_python_2", "simple_python", 1.0, "```python\n[f(a=2)]\n```", None),
             ("irrelevance_1", "irrelevance", 0.0, "[g(x='y')]", "irrelevance_error:decoder_success")]


def test_table_counts_scores_shapes_and_failures_per_mode(tmp_path, capsys):
    script = _script()
    fc, prompting = _run(tmp_path / "fc", "fc", FC), _run(tmp_path / "pr", "prompting", PROMPTING)
    assert script.main(["--fc", str(fc), "--prompting", str(prompting), "--out", str(tmp_path / "out")]) == 0
    table = json.loads((tmp_path / "out" / "table.json").read_text())["tables"]
    assert table["fc"]["simple_python"]["accuracy"] == 0.5 and table["prompting"]["simple_python"]["accuracy"] == 1.0
    assert table["fc"]["simple_python"]["shapes"] == {"tool_call": 1, "json_call": 1}
    assert table["prompting"]["simple_python"]["shapes"] == {"python_list": 2}
    assert table["fc"]["irrelevance"]["shapes"] == {"prose": 1}
    assert table["prompting"]["irrelevance"]["errors"] == {"irrelevance_error:decoder_success": 1}
    low, high = table["fc"]["simple_python"]["ci95"]
    assert 0.0 < low < 0.5 < high < 1.0
    md = (tmp_path / "out" / "table.md").read_text()
    assert "| simple_python | 2 | 50.0 |" in md and "| 61.2 |" in md and "| 58.2 |" in md


def test_runs_in_the_wrong_mode_or_of_other_items_are_refused(tmp_path):
    script = _script()
    fc, prompting = _run(tmp_path / "fc", "fc", FC), _run(tmp_path / "pr", "prompting", PROMPTING)
    with pytest.raises(SystemExit, match="ran in mode 'prompting', given as --fc"):
        script.main(["--fc", str(prompting), "--prompting", str(fc), "--out", str(tmp_path / "out")])
    other = _run(tmp_path / "other", "prompting", PROMPTING[:2])
    with pytest.raises(SystemExit, match="scored different items"):
        script.main(["--fc", str(fc), "--prompting", str(other), "--out", str(tmp_path / "out")])


def test_one_mode_alone(tmp_path):
    script = _script()
    prompting = _run(tmp_path / "pr", "prompting", PROMPTING)
    assert script.main(["--prompting", str(prompting), "--out", str(tmp_path / "out")]) == 0
    md = (tmp_path / "out" / "table.md").read_text()
    assert md.splitlines()[0] == "| category | n | ours, prompting | 95% CI | published, prompting |"
    assert "| simple_python | 2 | 100.0 | 34.2 - 100.0 | 58.2 |" in md
    with pytest.raises(SystemExit):
        script.main(["--out", str(tmp_path / "out")])
