"""Hostile Hugging Face configs: every reader goes through hpgo/_files.py (a
FIFO with no writer or /dev/zero is refused, not read forever), and every
bad value is a ValueError naming the field and the file."""
import json
import os
import sys

import pytest

import hpgo

from robust_child import run_child

BASE = {"model_type": "mixtral", "hidden_size": 1024, "intermediate_size": 4096,
        "num_attention_heads": 8, "num_hidden_layers": 4, "vocab_size": 1000,
        "max_position_embeddings": 2048, "num_local_experts": 8, "num_experts_per_tok": 2,
        "hidden_act": "silu"}


def write(tmp_path, cfg, text=None):
    p = tmp_path / "config.json"
    p.write_text(text if text is not None else json.dumps(cfg))
    return p


def test_base_config_reads(tmp_path):
    m = hpgo.transformer.from_hf_config(write(tmp_path, BASE))
    assert m.experts == 8 and m.hidden == 1024
    assert hpgo.transformer.from_hf_config(dict(BASE, hidden_size=1024.0)) == m


@pytest.mark.parametrize("field", ["num_local_experts", "first_k_dense_replace", "n_group",
                                   "sliding_window", "kv_lora_rank", "num_nextn_predict_layers",
                                   "hidden_size", "num_experts_per_tok", "q_lora_rank",
                                   "moe_layer_freq", "head_dim"])
@pytest.mark.parametrize("value", ["Infinity", "-Infinity", "NaN", '"8"', "[8]", "8.7", "1e400",
                                   "true", "{}"])
def test_hostile_values_name_field_and_file(tmp_path, field, value):
    cfg = dict(BASE, use_sliding_window=True, topk_method="noaux_tc", q_lora_rank=64,
               kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=16, v_head_dim=16,
               topk_group=1)
    text = json.dumps(cfg)[:-1] + f', "{field}": {value}}}'
    p = write(tmp_path, None, text)
    with pytest.raises(ValueError) as e:
        hpgo.transformer.from_hf_config(p)
    assert field in str(e.value) and str(p) in str(e.value), str(e.value)


@pytest.mark.parametrize("edit,words", [
    ({"num_attention_heads": 7}, "not a multiple of heads"),     # 1024 / 7
    ({"num_key_value_heads": 3}, "kv_heads"),                    # 8 heads in 3 groups
    ({"num_hidden_layers": 0}, "layers"),
    ({"model_type": "gpt2", "hidden_size": 1000, "num_attention_heads": 16}, "heads"),
])
def test_inconsistent_shapes_name_the_file(tmp_path, edit, words):
    # values each valid alone, refused by the model's own checks: still the file's name
    p = write(tmp_path, dict(BASE, **edit))
    with pytest.raises(ValueError) as e:
        hpgo.transformer.from_hf_config(p)
    assert str(e.value).startswith(f"{p}: ") and words in str(e.value), str(e.value)


@pytest.mark.skipif(sys.platform != "linux", reason="FIFOs and /dev/zero")
def test_fifo_and_device_are_refused(tmp_path):
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    child = run_child(f"""
import hpgo
out = {{}}
for p in ({str(fifo)!r}, '/dev/zero'):
    try:
        hpgo.transformer.from_hf_config(p)
        out[p] = 'read'
    except (ValueError, OSError) as e:
        out[p] = type(e).__name__ + ': ' + str(e)
result['out'] = out
""", timeout=60, address_space_mb=2048)
    assert child.returncode == 0, child.describe()
    out = child.result["out"]
    assert all(v != "read" for v in out.values()), out
    assert "device" in out["/dev/zero"], out
