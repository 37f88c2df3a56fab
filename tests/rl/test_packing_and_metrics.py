"""Batch packing for the update steps, and the run's metrics files / plot / summary table."""

import json

import numpy as np
import pytest

from genenv_jax.workdir.metrics import MetricsWriter, plot_curves, read_metrics, summary_table, truncate_metrics
from genenv_jax.rl.packing import length_bucket, pack_sequences, padded_row_count


def test_pack_sequences_layout():
    batch = pack_sequences([[5, 6, 7], [8]], [[1, 2], [3, 4, 9]], pad_id=0,
                           response_logprobs=[[-0.1, -0.2], [-0.3, -0.4, -0.5]], num_rows=4)
    assert batch["tokens"].shape == (4, 32)  # prompt bucket 16 + response bucket 16
    np.testing.assert_array_equal(batch["tokens"][0, 13:18], [5, 6, 7, 1, 2])
    np.testing.assert_array_equal(batch["tokens"][1, 15:19], [8, 3, 4, 9])
    np.testing.assert_array_equal(batch["attention_mask"][0].nonzero()[0], np.arange(13, 18))
    np.testing.assert_array_equal(batch["loss_mask"][1].nonzero()[0], [16, 17, 18])
    np.testing.assert_allclose(batch["old_logprobs"][1, 16:19], [-0.3, -0.4, -0.5])
    assert batch["attention_mask"][2:].sum() == 0 and batch["loss_mask"][2:].sum() == 0  # padding rows


def test_pack_sequences_errors():
    with pytest.raises(ValueError, match="2 prompts but 1 responses"):
        pack_sequences([[1], [2]], [[3]], 0)
    with pytest.raises(ValueError, match="row 0: 1 logprobs for 2 response tokens"):
        pack_sequences([[1]], [[2, 3]], 0, response_logprobs=[[0.0]])
    with pytest.raises(ValueError, match="exceed the padded lengths"):
        pack_sequences([[1] * 20], [[2]], 0, prompt_len=16)


def test_buckets():
    assert [length_bucket(n) for n in (1, 16, 17, 100)] == [16, 16, 32, 128]
    # From 384 up the ladder adds 1.5x powers of two: padding costs at most a third, sizes stay x128.
    assert [length_bucket(n) for n in (257, 384, 385, 513, 768, 769, 1025, 4097)] == [
        384, 384, 512, 768, 768, 1024, 1536, 6144]
    assert all(length_bucket(n) % 128 == 0 for n in range(129, 20000, 7))
    assert padded_row_count(10, 4) == 12 and padded_row_count(0, 4) == 4


def test_metrics_files_plot_and_summary(tmp_path):
    writer = MetricsWriter(tmp_path)
    for epoch in range(3):
        writer.write(epoch, {"p_hat_mean": 0.1 * epoch, "r_env_mean": 0.5, "parse_rate": 1.0, "agent/loss": 0.3,
                             "note": "text"})
    writer.close()
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["epoch"] for r in rows] == [0, 1, 2] and rows[2]["p_hat_mean"] == pytest.approx(0.2)
    assert list((tmp_path / "tensorboard").iterdir())  # event files written
    truncate_metrics(tmp_path / "metrics.jsonl", 1)  # a resumed run re-runs epoch 2
    assert [r["epoch"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [0, 1]
    png = plot_curves(rows, tmp_path / "curves.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = summary_table(rows)
    assert table.splitlines()[0].startswith("| epoch | parse_rate | p_hat_mean")
    assert "| 2 | 1 | 0.2 | 0.5 |" in table


def test_a_line_cut_by_a_crash_is_skipped_with_a_warning_and_kept_aside_on_resume(tmp_path, caplog):
    path = tmp_path / "metrics.jsonl"
    path.write_text(json.dumps({"epoch": 0, "x": 1}) + "\n" + '{"epoch": 1, "x"')
    assert read_metrics(path) == [{"epoch": 0, "x": 1}]
    assert any("skipped 1 bad line(s) (line 2: not JSON" in r.getMessage() for r in caplog.records)
    truncate_metrics(path, 0)
    assert path.read_text() == json.dumps({"epoch": 0, "x": 1}) + "\n"
    [aside] = tmp_path.glob("metrics.jsonl.bad-*")
    assert aside.read_text().endswith('{"epoch": 1, "x"')
