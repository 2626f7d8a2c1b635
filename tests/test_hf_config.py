"""hpgo.transformer.from_hf_config against the released checkpoints.

The configs are the Hugging Face config.json fields of the released models;
the counts are the published parameter counts (the Hub's safetensors
metadata, exact; the model cards where only a rounded figure is published),
never this code's output."""
import pytest

import hpgo
from test_moe import CONFIGS

LLAMA31_8B = {
    "model_type": "llama", "hidden_act": "silu", "hidden_size": 4096,
    "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
    "num_hidden_layers": 32, "vocab_size": 128256, "max_position_embeddings": 131072,
    "rope_theta": 500000.0, "tie_word_embeddings": False, "attention_bias": False,
    "mlp_bias": False, "head_dim": 128,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"}}
LLAMA31_70B = dict(LLAMA31_8B, hidden_size=8192, intermediate_size=28672,
                   num_attention_heads=64, num_hidden_layers=80)
LLAMA31_405B = dict(LLAMA31_8B, hidden_size=16384, intermediate_size=53248,
                    num_attention_heads=128, num_hidden_layers=126)
QWEN2_7B = {
    "model_type": "qwen2", "hidden_act": "silu", "hidden_size": 3584,
    "intermediate_size": 18944, "num_attention_heads": 28, "num_key_value_heads": 4,
    "num_hidden_layers": 28, "vocab_size": 152064, "max_position_embeddings": 131072,
    "rope_theta": 1000000.0, "tie_word_embeddings": False, "use_sliding_window": False,
    "sliding_window": 131072, "max_window_layers": 28}
QWEN3_8B = {
    "model_type": "qwen3", "hidden_act": "silu", "hidden_size": 4096,
    "intermediate_size": 12288, "num_attention_heads": 32, "num_key_value_heads": 8,
    "head_dim": 128, "num_hidden_layers": 36, "vocab_size": 151936,
    "max_position_embeddings": 40960, "rope_theta": 1000000, "tie_word_embeddings": False,
    "attention_bias": False, "use_sliding_window": False, "sliding_window": None}


@pytest.mark.parametrize("cfg, published", [
    (LLAMA31_8B, 8_030_261_248),        # meta-llama/Llama-3.1-8B
    (LLAMA31_70B, 70_553_706_496),      # meta-llama/Llama-3.1-70B
    (LLAMA31_405B, 405_853_388_800),    # meta-llama/Llama-3.1-405B
    (QWEN2_7B, 7_615_616_512),          # Qwen/Qwen2-7B: q, k and v biases
    (QWEN3_8B, 8_190_735_360),          # Qwen/Qwen3-8B
    (CONFIGS["qwen3-30b-a3b"], 30_532_122_624),     # Qwen/Qwen3-30B-A3B
    (CONFIGS["qwen3-235b-a22b"], 235_093_634_560),  # Qwen/Qwen3-235B-A22B
    (CONFIGS["mixtral-8x7b"], 46_702_792_704),      # mistralai/Mixtral-8x7B-v0.1
])
def test_parameters_equal_the_released_checkpoints(cfg, published):
    assert hpgo.transformer.from_hf_config(cfg).parameters == published


def test_rounded_published_counts():
    # OpenAI's gpt-oss model card: 116.83 B; DeepSeek-V3's README: 671 B + 14 B MTP
    oss = hpgo.transformer.from_hf_config(CONFIGS["gpt-oss-120b"], seq=4096)
    assert round(oss.parameters / 1e9, 2) == 116.83
    ds = hpgo.transformer.from_hf_config(CONFIGS["deepseek-v3"])
    assert round(ds.parameters / 1e9) == 671


def test_shape_fields_are_read():
    m = hpgo.transformer.from_hf_config(LLAMA31_8B)
    assert m.rope_theta == 500000.0 and m.head_dim == 128 and not m.tied
    assert m.rope_scaling_dict == LLAMA31_8B["rope_scaling"]
    q2 = hpgo.transformer.from_hf_config(QWEN2_7B)
    assert q2.qkv_bias and not q2.attn_bias and q2.window is None
    # the q/k/v biases are 28 x (3584 + 2 x 512) parameters, no output bias
    assert q2.parameters - q2.with_(qkv_bias=False).parameters == 28 * (3584 + 2 * 512)
    args = hpgo.ParallelPlan(global_batch=8, dp=8).megatron_args(q2)
    assert "--disable-bias-linear" in args and "--add-qkv-bias" in args
    assert "--rotary-base 1000000" in args and "--kv-channels 128" in args
    q3 = hpgo.transformer.from_hf_config(CONFIGS["qwen3-235b-a22b"])
    assert q3.head_dim == 128 != q3.hidden // q3.heads
    assert "--kv-channels 128" in hpgo.ParallelPlan(
        global_batch=8, dp=8, ep=8).megatron_args(q3)
    oss = hpgo.transformer.from_hf_config(dict(CONFIGS["gpt-oss-120b"], rope_theta=150000,
                                               rope_scaling={"rope_type": "yarn",
                                                             "factor": 32.0}), seq=4096)
    assert oss.rope_scaling_dict == {"rope_type": "yarn", "factor": 32.0}
    args = hpgo.ParallelPlan(global_batch=8, dp=8, ep=8, etp=1).megatron_args(oss)
    assert "--disable-bias-linear" not in args and "--softmax-type learnable" in args
    assert "--position-embedding-type yarn" in args and "--rotary-scaling-factor 32" in args
    # Llama 3 rope in the export; 3.1's scaling as Megatron's --use-rope-scaling
    args = hpgo.ParallelPlan(global_batch=8, dp=8).megatron_args(m)
    assert "--rotary-base 500000" in args and "--use-rope-scaling --rope-scaling-factor 8" in args
    assert "--rotary-base 500000" in hpgo.ParallelPlan(global_batch=8, dp=8).megatron_args(
        hpgo.transformer("llama3-70b"))
    # a model's identity ignores the rope settings (they change no work)
    assert hpgo.model_id(m) == hpgo.model_id(m.with_(rope_theta=10000.0, rope_scaling=None))
    assert hpgo.model_id(q2) != hpgo.model_id(q2.with_(qkv_bias=False))
    d = m.to_dict()
    assert hpgo.Transformer.from_dict(d) == m and isinstance(d["rope_scaling"], dict)


@pytest.mark.parametrize("cfg, what", [
    (dict(LLAMA31_8B, model_type="llama4"), "model_type 'llama4' is not read"),
    (dict(LLAMA31_8B, mlp_bias=True), "mlp_bias"),
    (dict(LLAMA31_8B, partial_rotary_factor=0.5), "partial_rotary_factor"),
    (dict(LLAMA31_8B, attention_chunk_size=8192), "attention_chunk_size"),
    (dict(LLAMA31_8B, rope_scaling={"rope_type": "dynamic", "factor": 2.0}),
     "rope_scaling type 'dynamic'"),
    (dict(LLAMA31_8B, rope_scaling={"rope_type": "llama3", "factor": 8.0, "alpha": 1.0}),
     "field 'alpha' is not understood"),
    (dict(LLAMA31_8B, rope_theta=-1.0), "config: rope_theta"),
    (dict(LLAMA31_8B, rope_theta=float("nan")), "config: rope_theta"),
    (dict(LLAMA31_8B, rope_theta="500000"), "config: rope_theta"),
    (dict(LLAMA31_8B, rope_scaling="llama3"), "config: rope_scaling must be a mapping"),
    (dict(LLAMA31_8B, rope_scaling={"rope_type": "llama3", "factor": float("inf")}),
     "config: rope_scaling factor must be a finite number"),
])
def test_what_is_not_modelled_is_refused_by_name(cfg, what):
    with pytest.raises(ValueError, match=what):
        hpgo.transformer.from_hf_config(cfg)


def test_exports_refuse_what_megatron_cannot_build():
    llama_bias = hpgo.transformer.from_hf_config(dict(LLAMA31_8B, attention_bias=True))
    with pytest.raises(ValueError, match="every linear layer or on q, k and v"):
        hpgo.ParallelPlan(global_batch=8, dp=8).megatron_args(llama_bias)
    other = hpgo.transformer("llama3-8b").with_(rope_scaling={"rope_type": "llama3",
                                                              "factor": 8.0,
                                                              "low_freq_factor": 2.0})
    with pytest.raises(ValueError, match="fixes"):
        hpgo.ParallelPlan(global_batch=8, dp=8).megatron_args(other)
    with pytest.raises(ValueError, match="no model of this shape"):
        hpgo.ParallelPlan(global_batch=8, dp=8).torchtitan_config(hpgo.transformer("gpt3-175b"))
    with pytest.raises(ValueError, match="attn_bias .* or qkv_bias"):
        hpgo.transformer("llama3-8b").with_(attn_bias=True, qkv_bias=True)
