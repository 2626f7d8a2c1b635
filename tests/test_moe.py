"""Mixture-of-experts models, latent attention, expert parallelism and FP8 in
the training-step model (hpgo.transformer, hpgo.simulate, hpgo.autoplan).

Reference values are published facts, never this code's output: the
Hugging Face config.json fields of the released checkpoints, their
published parameter counts (model cards; Mixtral's safetensors index), the
per-token FLOP terms of spec/training-model.md 2.2 and the collective
formulas of its section 4, recomputed here independently."""
import json
import math

import pytest

import hpgo

GIB = 2.0 ** 30

# ---- the released configurations (Hugging Face config.json fields) ---------

MIXTRAL_8X7B = {
    "model_type": "mixtral", "hidden_act": "silu", "hidden_size": 4096,
    "intermediate_size": 14336, "max_position_embeddings": 32768, "num_attention_heads": 32,
    "num_experts_per_tok": 2, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "num_local_experts": 8, "sliding_window": None, "tie_word_embeddings": False,
    "vocab_size": 32000}
QWEN3_30B_A3B = {
    "model_type": "qwen3_moe", "hidden_act": "silu", "hidden_size": 2048,
    "intermediate_size": 6144, "moe_intermediate_size": 768, "num_attention_heads": 32,
    "num_key_value_heads": 4, "head_dim": 128, "num_hidden_layers": 48, "num_experts": 128,
    "num_experts_per_tok": 8, "decoder_sparse_step": 1, "mlp_only_layers": [],
    "vocab_size": 151936, "tie_word_embeddings": False, "max_position_embeddings": 40960,
    "attention_bias": False, "use_sliding_window": False, "sliding_window": None}
QWEN3_235B_A22B = dict(QWEN3_30B_A3B, hidden_size=4096, intermediate_size=12288,
                       moe_intermediate_size=1536, num_attention_heads=64,
                       num_hidden_layers=94)
GPT_OSS_120B = {
    "model_type": "gpt_oss", "hidden_act": "silu", "hidden_size": 2880,
    "intermediate_size": 2880, "num_attention_heads": 64, "num_key_value_heads": 8,
    "head_dim": 64, "num_hidden_layers": 36, "num_local_experts": 128,
    "num_experts_per_tok": 4, "experts_per_token": 4, "vocab_size": 201088,
    "sliding_window": 128, "attention_bias": True, "tie_word_embeddings": False,
    "max_position_embeddings": 131072,
    "layer_types": ["sliding_attention", "full_attention"] * 18}
DEEPSEEK_V3 = {
    "model_type": "deepseek_v3", "hidden_act": "silu", "hidden_size": 7168,
    "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_attention_heads": 128,
    "num_key_value_heads": 128, "num_hidden_layers": 61, "n_routed_experts": 256,
    "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 3,
    "moe_layer_freq": 1, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 129280,
    "num_nextn_predict_layers": 1, "topk_method": "noaux_tc", "tie_word_embeddings": False,
    "max_position_embeddings": 163840, "attention_bias": False}

CONFIGS = {"mixtral-8x7b": MIXTRAL_8X7B, "qwen3-30b-a3b": QWEN3_30B_A3B,
           "qwen3-235b-a22b": QWEN3_235B_A22B, "gpt-oss-120b": GPT_OSS_120B,
           "deepseek-v3": DEEPSEEK_V3}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_from_hf_config_gives_the_preset(name):
    preset = hpgo.transformer(name)
    m = hpgo.transformer.from_hf_config(CONFIGS[name], seq=preset.seq)
    assert m.parameters == preset.parameters
    assert m.active_parameters == preset.active_parameters
    assert m.mtp_parameters == preset.mtp_parameters
    # the pretraining length the family documents, else seq= is required
    documented = {"mixtral-8x7b": 32768, "qwen3-30b-a3b": 4096, "qwen3-235b-a22b": 4096,
                  "deepseek-v3": 4096}
    if name in documented:
        assert hpgo.transformer.from_hf_config(CONFIGS[name]).seq == documented[name]
    else:
        with pytest.raises(ValueError, match="give seq="):
            hpgo.transformer.from_hf_config(CONFIGS[name])
    plan = hpgo.ParallelPlan(global_batch=8, tp=1, pp=1, dp=8, ep=8, micro_batch=1)
    a = hpgo.simulate(m, "dgx-h100", plan)
    b = hpgo.simulate(preset, "dgx-h100", plan)
    assert a.iteration_time == pytest.approx(b.iteration_time, rel=1e-12)


# ---- published parameter counts -------------------------------------------


def test_mixtral_counts_equal_the_checkpoint():
    m = hpgo.transformer("mixtral-8x7b")
    # safetensors index of mistralai/Mixtral-8x7B-v0.1: total_size 93,405,585,408
    # bytes in bf16; Mistral's announcement: 46.7 B total, 12.9 B active per token
    assert m.parameters == 93_405_585_408 // 2
    assert round(m.active_parameters / 1e9, 1) == 12.9
    assert round(hpgo.transformer("mixtral-8x22b").parameters / 1e9) == 141
    assert round(hpgo.transformer("mixtral-8x22b").active_parameters / 1e9) == 39


def test_qwen3_counts_equal_the_model_cards():
    # model cards: 30.5 B total, 3.3 B activated, 29.9 B non-embedding;
    # 235 B total, 22 B activated, 234 B non-embedding
    small, big = hpgo.transformer("qwen3-30b-a3b"), hpgo.transformer("qwen3-235b-a22b")
    assert round(small.parameters / 1e9, 1) == 30.5
    assert round(small.non_embedding_parameters / 1e9, 1) == 29.9
    assert math.floor(small.active_parameters / 1e8) / 10 == 3.3
    assert round(big.parameters / 1e9) == 235
    assert round(big.non_embedding_parameters / 1e9) == 234
    assert round(big.active_parameters / 1e9) == 22


def test_gpt_oss_counts_equal_the_model_card():
    # OpenAI's model card: 116.83 B total, 5.13 B active (the input embedding
    # is a lookup: not counted as active)
    m = hpgo.transformer("gpt-oss-120b")
    assert round(m.parameters / 1e9, 2) == 116.83
    input_embedding = m.embedding_parameters - m.output_layer_parameters
    assert round((m.active_parameters - input_embedding) / 1e9, 2) == 5.13


def test_deepseek_v3_counts_equal_the_report():
    # DeepSeek-V3: 671 B main model + 14 B multi-token prediction = 685 B
    # stored; 37 B activated per token
    m = hpgo.transformer("deepseek-v3")
    assert math.floor(m.parameters / 1e9) == 671
    # the module as stored: one MoE layer, the 2h -> h projection, norms and
    # its embedding and head copies, 13.46 B ("14 B" in DeepSeek's README)
    assert 13.4e9 < m.mtp_parameters < 14.5e9
    assert (m.parameters + m.mtp_parameters) / 685e9 == pytest.approx(1, abs=1e-3)
    input_embedding = m.embedding_parameters - m.output_layer_parameters
    assert round((m.active_parameters - input_embedding) / 1e9) == 37


def test_expert_parameters_are_the_routed_experts():
    m = hpgo.transformer("mixtral-8x7b")
    assert m.expert_parameters == 32 * 8 * 3 * 4096 * 14336
    d = hpgo.transformer("deepseek-v3")
    assert d.expert_parameters == 58 * 256 * 3 * 7168 * 2048
    assert hpgo.transformer("llama3-8b").expert_parameters == 0
    assert hpgo.transformer("llama3-8b").active_parameters == hpgo.transformer("llama3-8b").parameters


# ---- FLOPs -------------------------------------------------------------------


def moe_layer_flops(h, q, kv, s_eff, E, k, fe, n_sh=0, f_sh=0):
    """Spec 2.2: forward FLOPs per token of a GQA + SwiGLU MoE layer."""
    attn = 2 * h * (q + 2 * kv) + 4 * s_eff * q + 2 * q * h
    return attn + 2 * h * E + k * 6 * h * fe + n_sh * 6 * h * f_sh


def test_model_flops_follow_the_spec_terms():
    m = hpgo.transformer("mixtral-8x7b")
    per_tok = 32 * moe_layer_flops(4096, 4096, 1024, m.seq / 2, 8, 2, 14336) + 2 * 4096 * 32000
    plan = hpgo.ParallelPlan(global_batch=64, dp=8, ep=8)
    r = hpgo.simulate(m, "dgx-h100", plan)
    assert r.model_flops == pytest.approx(3 * per_tok * m.seq * 64, rel=1e-12)
    # DeepSeek-V3: latent attention projections, 3 dense layers, one MTP module
    d = hpgo.transformer("deepseek-v3")
    h, a, s = 7168, 128, d.seq
    proj = 2 * (h * 1536 + 1536 * a * 192 + h * 576 + 512 * a * 256 + a * 128 * h)
    core = 2 * (s / 2) * (a * 192 + a * 128)
    dense = proj + core + 6 * h * 18432
    moe = proj + core + 2 * h * 256 + 8 * 6 * h * 2048 + 6 * h * 2048
    head = 2 * h * 129280
    mtp = moe + 2 * 2 * h * h + head
    per_tok = 3 * (3 * dense + 58 * moe + head + mtp)
    r = hpgo.simulate(d, hpgo.Cluster.preset("dgx-h100", nodes=64),
                      hpgo.ParallelPlan(global_batch=64, tp=1, pp=16, dp=32, ep=32, micro_batch=1,
                                        zero=1))
    assert r.model_flops == pytest.approx(per_tok * s * 64, rel=1e-12)


def test_capacity_factor_pads_the_hardware_work_only():
    m = hpgo.transformer("mixtral-8x7b")
    plan = hpgo.ParallelPlan(global_batch=8, dp=8, ep=8)
    base = hpgo.simulate(m, "dgx-h100", plan)
    padded = hpgo.simulate(m.with_(capacity_factor=1.5), "dgx-h100", plan)
    assert padded.model_flops == base.model_flops
    assert padded.hw_flops > base.hw_flops
    assert padded.iteration_time > base.iteration_time


# ---- expert parallelism: memory ------------------------------------------------


def test_expert_weights_and_states_shard_over_ep():
    m = hpgo.transformer("mixtral-8x7b").with_(layers=8)
    c = hpgo.Cluster.preset("dgx-h100", nodes=1)
    stages = {}
    for ep in (1, 2, 4, 8):
        plan = hpgo.ParallelPlan(global_batch=8, dp=8, ep=ep, zero=1)
        r = hpgo.simulate(m, c, plan)
        st = r.stages[0]
        stages[ep] = (st["params"] - st["expert_params"], st["expert_params"], r.memory[0])
    dense1, expert1, _ = stages[1]
    assert expert1 == pytest.approx(8 * 8 * 3 * 4096 * 14336)
    for ep, (dense, expert, mem) in stages.items():
        assert dense == pytest.approx(dense1)
        assert expert == pytest.approx(expert1 / ep)
        # bf16 weights 2 + fp32 gradients 4 bytes per parameter held; the
        # distributed optimizer's 12 bytes over dp = 8 (dense) and over the
        # expert data-parallel group 8 / ep (experts)
        assert mem.weights == pytest.approx(2 * (dense + expert))
        assert mem.gradients == pytest.approx(4 * (dense + expert))
        assert mem.optimizer == pytest.approx(12 * dense / 8 + 12 * expert / (8 // ep))


def test_expert_activations_follow_the_routed_tokens():
    m = hpgo.transformer("mixtral-8x7b").with_(layers=4)
    plan = hpgo.ParallelPlan(global_batch=8, dp=8, ep=8, micro_batch=1)
    base = hpgo.simulate(m, "dgx-h100", plan).stages[0]["activation_bytes_layers"]
    top4 = hpgo.simulate(m.with_(topk=4), "dgx-h100", plan).stages[0]["activation_bytes_layers"]
    s, h, f = m.seq, 4096, 14336
    # two more routed copies per token: the expert's input (2h bytes), its
    # fused SwiGLU's input (gate and up, 2 x 2f) and the fc2 input (2f)
    assert top4 - base == pytest.approx(4 * s * 2 * (2 * h + 6 * f))
    unfused = hpgo.simulate(m.with_(flash=False, topk=4), "dgx-h100", plan).stages[0]
    unfused_base = hpgo.simulate(m.with_(flash=False), "dgx-h100", plan).stages[0]
    # without fused kernels the SiLU output (2f) is stored too
    assert unfused["activation_bytes_layers"] - unfused_base["activation_bytes_layers"] == \
        pytest.approx(4 * s * 2 * (2 * h + 8 * f))


# ---- expert parallelism: communication ------------------------------------------


def test_dispatch_and_combine_are_all_to_alls_on_the_ep_group():
    m = hpgo.transformer("mixtral-8x7b").with_(layers=4)
    c = hpgo.Cluster.preset("dgx-h100", nodes=2)
    for ep, placement, stride in ((8, "inner", 1), (8, "outer", 2), (16, "inner", 1)):
        plan = hpgo.ParallelPlan(global_batch=16, dp=16, ep=min(ep, 8) if ep == 16 else ep,
                                 ep_placement=placement, micro_batch=1)
        if ep == 16:
            m2 = m.with_(experts=16)
            plan = plan.with_(ep=16)
        else:
            m2 = m
        st = hpgo.simulate(m2, c, plan).stages[0]
        send = m.seq * 2 * 4096 * 2  # tokens x top-2 x h x bf16 per rank
        a2a = c.collective_time("all_to_all", plan.ep, send, stride=stride)
        assert st["ep_forward"] == pytest.approx(4 * 2 * a2a, rel=1e-12)
        assert st["ep_backward"] == pytest.approx(4 * 2 * a2a, rel=1e-12)


def test_ep_across_nodes_costs_more_than_inside():
    m = hpgo.transformer("mixtral-8x7b").with_(layers=8)
    c = hpgo.Cluster.preset("dgx-h100", nodes=2)
    def pair(gb):
        inner = hpgo.simulate(m, c, hpgo.ParallelPlan(global_batch=gb, dp=16, ep=8))
        outer = hpgo.simulate(m, c, hpgo.ParallelPlan(global_batch=gb, dp=16, ep=8,
                                                      ep_placement="outer"))
        return inner, outer

    inner, outer = pair(256)
    assert outer.stages[0]["ep_forward"] > 3 * inner.stages[0]["ep_forward"]
    assert outer.iteration_time > inner.iteration_time  # 16 micro-batches of all-to-alls
    # with one micro-batch the expert gradients' all-reduce dominates, and
    # "outer" keeps that group inside a node: the trade-off autoplan weighs
    inner, outer = pair(16)
    assert outer.iteration_time < inner.iteration_time


def test_routing_imbalance_slows_the_busiest_rank():
    m = hpgo.transformer("mixtral-8x7b").with_(layers=4)
    plan = hpgo.ParallelPlan(global_batch=8, dp=8, ep=8)
    a = hpgo.simulate(m, "dgx-h100", plan)
    b = hpgo.simulate(m.with_(routing_imbalance=1.5), "dgx-h100", plan)
    assert b.stages[0]["ep_forward"] > 1.3 * a.stages[0]["ep_forward"]
    assert b.iteration_time > a.iteration_time
    assert b.memory[0].activations > a.memory[0].activations


def test_expert_tensor_parallel_gathers_tokens():
    m = hpgo.transformer("qwen3-30b-a3b").with_(layers=4)
    c = hpgo.Cluster.preset("dgx-h100", nodes=1)
    etp1 = hpgo.simulate(m, c, hpgo.ParallelPlan(global_batch=8, tp=2, dp=4, ep=8, etp=1,
                                                 sequence_parallel=True))
    etp2 = hpgo.simulate(m, c, hpgo.ParallelPlan(global_batch=8, tp=2, dp=4, ep=4,
                                                 sequence_parallel=True))
    assert etp2.plan.etp is None and etp2.plan.expert_data_parallel == 1
    # the same expert shard size (E/8 whole experts vs E/4 half experts)
    assert etp1.stages[0]["expert_params"] == pytest.approx(etp2.stages[0]["expert_params"])
    assert etp2.stages[0]["ep_forward"] != etp1.stages[0]["ep_forward"]


# ---- precision fp8 -------------------------------------------------------------


def test_fp8_runs_gemms_faster_and_keeps_weight_copies():
    m = hpgo.transformer("mixtral-8x7b").with_(layers=8)
    plan = hpgo.ParallelPlan(global_batch=8, dp=8, ep=8, micro_batch=1)
    bf = hpgo.simulate(m, "dgx-h100", plan, precision="bf16")
    f8 = hpgo.simulate(m, "dgx-h100", plan, precision="fp8")
    assert f8.stages[0]["forward"] < 0.8 * bf.stages[0]["forward"]
    # weights: bf16 + an fp8 copy + its transpose (4 bytes per parameter)
    assert f8.memory[0].weights == pytest.approx(2 * bf.memory[0].weights)
    # GEMM inputs saved for the backward in fp8
    assert f8.memory[0].activations < bf.memory[0].activations
    assert f8.model_flops == bf.model_flops
    # MFU is against the precision's dense peak; the bf16-peak figure stays available
    assert f8.mfu_bf16 == pytest.approx(bf.mfu * bf.iteration_time / f8.iteration_time)
    c = hpgo.Cluster.preset("dgx-h100")
    assert f8.mfu == pytest.approx(f8.mfu_bf16 * c.gpu.bf16_flops / c.gpu.fp8_flops)


# ---- checks ----------------------------------------------------------------------


@pytest.mark.parametrize("call,words", [
    (lambda: hpgo.transformer("mixtral-8x7b", topk=9), "topk"),
    (lambda: hpgo.transformer("llama3-8b", topk=2), "experts > 0"),
    (lambda: hpgo.transformer("mixtral-8x7b", routing_imbalance=0.5), "routing_imbalance"),
    (lambda: hpgo.transformer("mixtral-8x7b", capacity_factor=0), "capacity_factor"),
    (lambda: hpgo.transformer("mixtral-8x7b", expert_ffn=None), "expert_ffn"),
    (lambda: hpgo.transformer("deepseek-v3", kv_lora=0), "mla"),
    (lambda: hpgo.ParallelPlan(global_batch=8, dp=4, ep=8), "must divide"),
    (lambda: hpgo.ParallelPlan(global_batch=8, dp=8, ep=2, ep_placement="far"), "ep_placement"),
    (lambda: hpgo.simulate("mixtral-8x7b", "dgx-h100",
                           hpgo.ParallelPlan(global_batch=8, dp=8, ep=3)), "must divide"),
    (lambda: hpgo.simulate("mixtral-8x7b", "dgx-h100",
                           hpgo.ParallelPlan(global_batch=8, tp=2, dp=4, ep=8, etp=1)),
     "sequence_parallel"),
    (lambda: hpgo.simulate(hpgo.transformer("mixtral-8x7b", experts=6), "dgx-h100",
                           hpgo.ParallelPlan(global_batch=8, dp=8, ep=4)), "ep=4 must divide"),
    (lambda: hpgo.transformer.from_hf_config(dict(QWEN3_30B_A3B, mlp_only_layers=[3])),
     "mlp_only_layers"),
])
def test_bad_moe_arguments(call, words):
    with pytest.raises(ValueError, match=words):
        call()


def test_dense_model_ids_are_unchanged_by_the_new_fields():
    m = hpgo.transformer("llama3-8b")
    d = {k: v for k, v in m.to_dict().items()}
    assert hpgo.model_id(m) == hpgo.model_id(hpgo.Transformer.from_dict(d))
    assert hpgo.model_id(m) != hpgo.model_id(m.with_(experts=8, topk=2, expert_ffn=14336))


# ---- autoplan --------------------------------------------------------------------


def test_autoplan_searches_the_expert_layout():
    m = hpgo.transformer("mixtral-8x7b")
    c = hpgo.Cluster.preset("dgx-h100", nodes=4)
    best = hpgo.autoplan(m, c, 128, top=3)
    assert best.plans and best.plans[0].result.fits
    assert best.plans[0].plan.ep > 1  # 47 B of experts: ep=1 does not fit 80 GB with pp <= 4
    fixed = hpgo.autoplan(m, c, 128, top=1, ep=2, etp=1, ep_placement="inner")
    assert all(p.plan.ep == 2 for p in fixed.plans)
    assert fixed.plans[0].result.iteration_time >= best.plans[0].result.iteration_time


def test_autoplan_bounds_are_exact_on_moe_models():
    m = hpgo.transformer("qwen3-30b-a3b").with_(layers=8, seq=2048)
    c = hpgo.Cluster.preset("dgx-h100", nodes=2)
    kw = dict(top=5, max_micro_batch=2, max_virtual_stages=2)
    fast = hpgo.autoplan(m, c, 32, **kw)
    full = hpgo.autoplan(m, c, 32, exhaustive=True, **kw)
    assert [p.plan for p in fast.plans] == [p.plan for p in full.plans]
    assert fast.stats["simulated"] < full.stats["simulated"]


def test_exports_carry_the_expert_layout():
    m = hpgo.transformer("deepseek-v3")
    plan = hpgo.ParallelPlan(global_batch=1024, tp=2, pp=8, dp=64, ep=64, etp=1,
                             micro_batch=1, sequence_parallel=True)
    a = plan.megatron_args(m)
    for flag in ("--expert-model-parallel-size 64", "--expert-tensor-parallel-size 1",
                 "--num-experts 256", "--moe-router-topk 8", "--moe-ffn-hidden-size 2048",
                 "--multi-latent-attention", "--q-lora-rank 1536", "--mtp-num-layers 1",
                 "--moe-shared-expert-intermediate-size 2048", "--moe-layer-freq"):
        assert flag in a
    # torchtitan borrows the ep ranks from the FSDP-sharded, cp and tp ranks
    # (a plan left at ZeRO 0 runs on torchtitan's default full sharding)
    with pytest.raises(ValueError, match="borrows from the sharded"):
        plan.with_(zero=3, shard_size=1).torchtitan_config(m)
    assert "expert_parallel_degree=64" in plan.with_(zero=3).torchtitan_config(m)
    assert plan.torchtitan_config(m) == plan.with_(zero=3).torchtitan_config(m)
    assert "ep=64 etp=1" in plan.describe()
    assert hpgo.ParallelPlan.from_dict(plan.to_dict()) == plan


def test_distributed_autoplan_merges_moe_rankings_exactly():
    from concurrent.futures import ThreadPoolExecutor

    m = hpgo.transformer("qwen3-30b-a3b", layers=8, seq=2048)
    c = hpgo.Cluster.preset("dgx-h100", nodes=2)
    local = hpgo.autoplan(m, c, 64, top=8, objective="cost")
    assert any(p.plan.ep > 1 for p in local.plans)
    with ThreadPoolExecutor(2) as ex:
        split = hpgo.autoplan(m, c, 64, top=8, objective="cost", executor=ex)
    assert [p.plan for p in split.plans] == [p.plan for p in local.plans]


def test_moe_values_pickle_and_round_trip():
    import pickle

    m = hpgo.transformer("deepseek-v3")
    assert pickle.loads(pickle.dumps(m)) == m
    assert hpgo.Transformer.from_dict(m.to_dict()) == m
    p = hpgo.ParallelPlan(global_batch=8, dp=8, ep=4, etp=1, ep_placement="outer")
    assert pickle.loads(pickle.dumps(p)) == p


def test_all_to_all_buffers_and_fp8_scaling_state_in_memory():
    m = hpgo.transformer("mixtral-8x7b").with_(layers=4)
    c = hpgo.Cluster.preset("dgx-h100", nodes=1)
    # a layer's working set alone: the first of two pipeline stages (without
    # pipelining the peak holds the larger of a layer's and the head's)
    one = hpgo.simulate(m, c, hpgo.ParallelPlan(global_batch=8, pp=2, dp=4, ep=1))
    four = hpgo.simulate(m, c, hpgo.ParallelPlan(global_batch=8, pp=2, dp=4, ep=4))
    send = m.seq * 2 * 4096 * 2  # each rank's routed token copies, bf16
    assert four.stages[0]["transient_bytes"] - one.stages[0]["transient_bytes"] == \
        pytest.approx(2 * send)
    bf = hpgo.simulate(m, c, hpgo.ParallelPlan(global_batch=8, dp=8, ep=8), precision="bf16")
    f8 = hpgo.simulate(m, c, hpgo.ParallelPlan(global_batch=8, dp=8, ep=8), precision="fp8")
    # per layer: the fused QKV and output GEMMs and the rank's one expert's two,
    # each with three tensors' amax history (1024), scale and inverse in fp32
    assert f8.memory[0].other - bf.memory[0].other == pytest.approx(4 * 4 * 3 * 1026 * 4)


def test_overlapped_all_to_alls_expose_only_what_compute_cannot_hide():
    import dataclasses

    m = hpgo.transformer("mixtral-8x7b").with_(layers=4)
    fast = hpgo.Cluster.preset("dgx-h100", nodes=2)
    nv = fast.levels[0]
    slow = dataclasses.replace(fast, levels=(dataclasses.replace(
        nv, bandwidth=nv.bandwidth / 100, collective_bandwidth=nv.collective_bandwidth / 100),
        *fast.levels[1:]))
    plan = hpgo.ParallelPlan(global_batch=64, pp=4, dp=4, ep=4)
    hidden_less = 0
    for c in (fast, slow):
        off = hpgo.simulate(m, c, plan).stages[1]  # one MoE layer, no embedding or head
        on = hpgo.simulate(m, c, plan.with_(overlap_moe_comm=True)).stages[1]
        comm = off["ep_forward"] + off["ep_backward"]
        comp = off["forward"] - off["ep_forward"] + off["backward_input"] - off["ep_backward"] \
            + off["backward_weight"]
        exposed = on["ep_forward"] + on["ep_backward"]
        # each communication phase pairs with one compute phase of the other
        # micro-batch, and 0.65 of what that pairing hides is credited:
        # never less exposed than the totals allow, never more than with no
        # overlap; past the compute, all of it but 0.65 of the compute
        ideal = max(0.0, comm - comp)
        assert comm - 0.65 * (comm - ideal) - 1e-12 <= exposed <= comm + 1e-12
        if comm > 1.2 * comp:
            assert exposed == pytest.approx(comm - 0.65 * comp, rel=1e-9)
    assert comm > comp  # the slow cluster leaves some exposed
    # in between, unbalanced phases expose time although the totals would hide it
    for f in (4, 8, 16, 32):
        mid = dataclasses.replace(fast, levels=(dataclasses.replace(
            nv, bandwidth=nv.bandwidth / f, collective_bandwidth=nv.collective_bandwidth / f),
            *fast.levels[1:]))
        off = hpgo.simulate(m, mid, plan).stages[1]
        on = hpgo.simulate(m, mid, plan.with_(overlap_moe_comm=True)).stages[1]
        comm = off["ep_forward"] + off["ep_backward"]
        comp = off["forward"] - off["ep_forward"] + off["backward_input"] - off["ep_backward"] \
            + off["backward_weight"]
        if comm < comp and on["ep_forward"] > 0:
            hidden_less += 1
    assert hidden_less >= 1
    # another share: past the compute, all of it but that share of the compute
    for share in (0.3, 1.0):
        on = hpgo.simulate(m, slow, plan.with_(overlap_moe_comm=share)).stages[1]
        off = hpgo.simulate(m, slow, plan).stages[1]
        comm = off["ep_forward"] + off["ep_backward"]
        comp = off["forward"] - off["ep_forward"] + off["backward_input"] - off["ep_backward"] \
            + off["backward_weight"]
        assert on["ep_forward"] + on["ep_backward"] == pytest.approx(comm - share * comp, rel=1e-9)
    c = fast
    assert hpgo.parallel.MEGATRON_OVERLAP_SHARE == 0.65
    assert "ep-overlap " in plan.with_(overlap_moe_comm=True).describe()
    half = plan.with_(overlap_moe_comm=0.5)
    assert "ep-overlap=0.5" in half.describe() and half.overlap_moe_comm == 0.5
    assert hpgo.ParallelPlan.from_dict(json.loads(half.to_json())) == half
    for bad, err in ((0, ValueError), (1.5, ValueError), (float("nan"), ValueError),
                     ("yes", TypeError), (None, TypeError)):
        with pytest.raises(err, match="overlap_moe_comm"):
            plan.with_(overlap_moe_comm=bad)
    shared = hpgo.autoplan(m, c, 64, top=1, overlap_moe_comm=0.5)
    assert shared[0].plan.overlap_moe_comm == 0.5
    assert "--overlap-moe-expert-parallel-comm" in half.megatron_args(m)
    assert "ep-overlap" in plan.with_(overlap_moe_comm=True).describe()
    assert "--overlap-moe-expert-parallel-comm" in plan.with_(overlap_moe_comm=True).megatron_args(m)
    best = hpgo.autoplan(m, c, 64, top=2, overlap_moe_comm=True)
    assert all(p.plan.overlap_moe_comm for p in best.plans)
    with pytest.raises(TypeError, match="overlap_moe_comm"):
        hpgo.autoplan(m, c, 64, overlap_moe_comm="yes")


def test_expert_gradients_sync_without_data_parallelism():
    # tp=2 with etp=1: each expert is whole on both GPUs of a tp group, so its
    # gradients are reduced over that group even with dp = 1
    m = hpgo.transformer("mixtral-8x7b").with_(layers=2)
    c = hpgo.Cluster.preset("dgx-h100", nodes=1)
    plan = hpgo.ParallelPlan(global_batch=8, tp=2, pp=1, dp=1, ep=1, etp=1,
                             sequence_parallel=True)
    assert plan.expert_data_parallel == 2
    r = hpgo.simulate(m, c, plan, timeline=True)
    syncs = [e for e in r.events if e[3] in ("all_reduce", "allreduce")]
    assert syncs, sorted({e[3] for e in r.events})
    assert r.iteration_time > r.compute_time


def test_selective_recomputation_with_fused_attention_is_megatrons_module_list():
    m = hpgo.transformer("deepseek-v3").with_(layers=8, dense_first=1, mtp=0)
    c = hpgo.Cluster.preset("dgx-h100", nodes=1)
    plan = hpgo.ParallelPlan(global_batch=8, tp=1, pp=1, dp=8, ep=8, micro_batch=1)
    none = hpgo.simulate(m, c, plan).stages[0]
    sel = hpgo.simulate(m, c, plan.with_(recompute="selective")).stages[0]
    s, a = m.seq, 128
    # per layer: q, k, v of every head (192 + 192 + 128 wide, bf16), the two
    # normed latents and the two norm outputs (bf16 GEMM inputs) are not stored;
    # in MoE layers neither the experts' fc2 inputs (8 routed slots x 2048)
    per_layer = s * (2 * a * (192 + 192 + 128) + 2 * (1536 + 512) + 2 * 2 * 7168)
    routed = s * 8 * 2 * 2048
    assert none["activation_bytes_layers"] - sel["activation_bytes_layers"] == \
        pytest.approx(8 * per_layer + 7 * routed)
    assert 0 < sel["recompute"] < 0.2 * sel["forward"]
    assert "--recompute-modules layernorm moe_act mla_up_proj" in \
        plan.with_(recompute="selective").megatron_args(m.with_(layers=8, dense_first=0))
    # a model without fused kernels keeps Korthikanti's attention-core recomputation
    g = hpgo.ParallelPlan(global_batch=8, dp=8, recompute="selective")
    assert "--recompute-activations" in g.megatron_args(hpgo.transformer("gpt3-175b"))


# ---- node-deduplicating dispatch (DeepEP) and node-limited routing -----------------


def _none_of(M, m, k):
    return math.comb(M - m, k) / math.comb(M, k)


def test_deepep_dispatch_crosses_once_per_node_touched():
    """Qwen3-30B-A3B (128 experts, top-8) with ep 16 over two DGX H100
    nodes: a token crosses to the other node once if any of its 8 experts
    is there, and every copy for another GPU of a node moves over NVLink."""
    m = hpgo.transformer("qwen3-30b-a3b").with_(layers=2)
    c = hpgo.Cluster.preset("dgx-h100", nodes=2)
    plan = hpgo.ParallelPlan(global_batch=16, dp=16, ep=16, micro_batch=1)
    send = m.seq * 8 * 2048 * 2                       # the rank's routed copies, bf16
    nodes, g0 = 2, 8
    touched = nodes * (1 - _none_of(128, 64, 8))       # expected nodes a token reaches
    ib, nv = c.levels[1], c.levels[0]
    t_out = send / 8 * touched * (nodes - 1) / nodes / (ib.collective_bandwidth * ib.efficiency)
    t_in = send * (g0 - 1) / g0 / (nv.collective_bandwidth * nv.efficiency)
    a2a = max(t_out, t_in) + (nodes - 1) * ib.latency + (g0 - 1) * nv.latency
    dedup = hpgo.simulate(m, c, plan.with_(moe_dispatcher="deepep")).stages[0]
    assert dedup["ep_forward"] == pytest.approx(2 * 2 * a2a, rel=1e-12)
    plain = hpgo.simulate(m, c, plan).stages[0]
    assert plain["ep_forward"] == pytest.approx(
        2 * 2 * c.collective_time("all_to_all", 16, send), rel=1e-12)
    assert dedup["ep_forward"] < 0.6 * plain["ep_forward"]
    # inside one node there is nothing to deduplicate
    one = hpgo.Cluster.preset("dgx-h100", nodes=1)
    p8 = hpgo.ParallelPlan(global_batch=8, dp=8, ep=8, micro_batch=1)
    assert hpgo.simulate(m, one, p8.with_(moe_dispatcher="deepep")).iteration_time == \
        hpgo.simulate(m, one, p8).iteration_time


def test_node_limited_routing_reaches_fewer_nodes():
    """DeepSeek-V3 routes a token within 4 of 8 expert groups; with ep 64 on
    8 nodes each group is a node, so a token reaches at most 4 nodes -- the
    formula hpgo uses agrees with sampling the routing."""
    import random
    E, k, groups, tg, nodes = 256, 8, 8, 4, 8
    per = E // groups
    want = nodes * (1 - ((1 - tg / groups) + tg / groups * _none_of(tg * per, per, k)))
    rng = random.Random(7)
    n, total = 20000, 0
    for _ in range(n):
        chosen = rng.sample(range(groups), tg)
        experts = rng.sample([g * per + i for g in chosen for i in range(per)], k)
        total += len({e // (E // nodes) for e in experts})
    assert total / n == pytest.approx(want, rel=0.02)
    assert want < 4 < nodes * (1 - _none_of(E, E // nodes, k))   # unrestricted: about 5.3
    m = hpgo.transformer("deepseek-v3")
    assert (m.routing_groups, m.routing_group_topk) == (8, 4)
    c = hpgo.Cluster.preset("dgx-h100", nodes=16)
    plan = hpgo.ParallelPlan(global_batch=128, tp=2, pp=8, dp=8, ep=16, etp=1,
                             sequence_parallel=True, moe_dispatcher="deepep")
    limited = hpgo.simulate(m, c, plan).stages[4]["ep_forward"]
    free = hpgo.simulate(m.with_(routing_groups=1, routing_group_topk=1), c, plan).stages[4]
    assert limited < free["ep_forward"]


def test_dispatcher_in_plans_exports_autoplan_and_files(tmp_path):
    m = hpgo.transformer("qwen3-235b-a22b")
    plan = hpgo.ParallelPlan(global_batch=2048, tp=2, pp=8, dp=16, ep=32, etp=1,
                             sequence_parallel=True, moe_dispatcher="deepep")
    assert "deepep" in plan.describe()
    assert "--moe-token-dispatcher-type flex --moe-enable-deepep" in plan.megatron_args(m)
    assert "--moe-token-dispatcher-type alltoall" in plan.with_(
        moe_dispatcher="alltoall").megatron_args(m)
    assert "--moe-router-num-groups 8 --moe-router-group-topk 4" in \
        plan.with_(ep=32).megatron_args(hpgo.transformer("deepseek-v3"))
    plan.save(tmp_path / "p.json")
    assert hpgo.ParallelPlan.load(tmp_path / "p.json") == plan
    old = plan.to_dict()
    del old["moe_dispatcher"]                     # files written before the field
    assert hpgo.ParallelPlan.from_dict(old).moe_dispatcher == "alltoall"
    c = hpgo.Cluster.preset("dgx-h100", nodes=4)
    mx = hpgo.transformer("qwen3-30b-a3b")
    r = hpgo.autoplan(mx, c, 256, top=3, ep=16, moe_dispatcher="deepep")
    assert r.plans and all(p.plan.moe_dispatcher == "deepep" for p in r.plans)
    plain = hpgo.autoplan(mx, c, 256, top=1, ep=16)
    assert plain.plans[0].plan.moe_dispatcher == "alltoall"
    assert r.plans[0].result.iteration_time <= plain.plans[0].result.iteration_time
    with pytest.raises(ValueError, match="moe_dispatcher"):
        hpgo.ParallelPlan(global_batch=8, moe_dispatcher="nccl")
    with pytest.raises(ValueError, match="moe_dispatcher"):
        hpgo.autoplan(mx, c, 256, moe_dispatcher="hybridep")


@pytest.mark.parametrize("fields, words", [
    (dict(routing_groups=3), "routing_groups"),
    (dict(routing_groups=8, routing_group_topk=9), "routing_group_topk"),
    (dict(routing_groups=64, routing_group_topk=1), "at least topk"),
    (dict(routing_groups=0), "routing_groups"),
])
def test_bad_routing_groups(fields, words):
    with pytest.raises((ValueError, TypeError), match=words):
        hpgo.transformer("deepseek-v3", **fields)


def test_from_hf_config_reads_node_limited_routing():
    cfg = {"model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432,
           "num_attention_heads": 128, "num_key_value_heads": 128, "num_hidden_layers": 61,
           "vocab_size": 129280, "max_position_embeddings": 4096, "n_routed_experts": 256,
           "num_experts_per_tok": 8, "moe_intermediate_size": 2048, "n_shared_experts": 1,
           "first_k_dense_replace": 3, "topk_method": "noaux_tc", "n_group": 8,
           "topk_group": 4, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
           "qk_rope_head_dim": 64, "v_head_dim": 128, "num_nextn_predict_layers": 1,
           "tie_word_embeddings": False, "hidden_act": "silu", "rms_norm_eps": 1e-6}
    m = hpgo.transformer.from_hf_config(cfg)
    assert (m.routing_groups, m.routing_group_topk) == (8, 4)
    assert hpgo.model_id(m.with_(name="deepseek-v3")) == hpgo.model_id(hpgo.transformer("deepseek-v3"))


def test_fp8_params_keep_only_the_fp8_weights():
    m = hpgo.transformer("llama3-70b")
    c = hpgo.Cluster.preset("dgx-h100", nodes=8)
    plan = hpgo.ParallelPlan(global_batch=128, tp=4, pp=8, dp=2, virtual_stages=5,
                             schedule="interleaved-1f1b", sequence_parallel=True, zero=1)
    a = hpgo.simulate(m, c, plan, precision="fp8", timeline=False)
    b = hpgo.simulate(m, c, plan.with_(fp8_params=True), precision="fp8", timeline=False)
    for x, y in zip(a.memory, b.memory):
        # 4 bytes per parameter (16-bit weight, fp8 copy, transpose) -> 2
        assert y.weights == pytest.approx(x.weights / 2, rel=1e-12)
        assert y.optimizer == x.optimizer and y.gradients == x.gradients
    assert b.iteration_time == a.iteration_time
    bf = hpgo.simulate(m, c, plan.with_(fp8_params=True), precision="bf16", timeline=False)
    assert bf.memory[0].weights == hpgo.simulate(m, c, plan, precision="bf16",
                                                 timeline=False).memory[0].weights
    assert "--fp8-param-gather" in plan.with_(fp8_params=True).megatron_args(m, precision="fp8")
    assert "--fp8-param-gather" not in plan.megatron_args(m, precision="fp8")
    old = plan.to_dict()
    del old["fp8_params"]
    assert hpgo.ParallelPlan.from_dict(old) == plan
    r = hpgo.autoplan(m, c, 128, precision="fp8", top=2, tp=4, pp=8, fp8_params=True)
    assert r.plans and all(p.plan.fp8_params for p in r.plans)
    with pytest.raises(TypeError, match="fp8_params"):
        hpgo.ParallelPlan(global_batch=8, fp8_params=1)


def test_overlap_charges_the_sms_communication_kernels_hold():
    m = hpgo.transformer("qwen3-30b-a3b").with_(layers=2)
    c = hpgo.Cluster.preset("dgx-h100", nodes=2)
    assert c.gpu.multiprocessors == 132
    assert hpgo.Cluster.preset("dgx-a100-80gb").gpu.multiprocessors == 108
    plan = hpgo.ParallelPlan(global_batch=32, dp=16, ep=16, micro_batch=1)
    for disp in ("alltoall", "deepep"):
        p = plan.with_(moe_dispatcher=disp)
        off = hpgo.simulate(m, c, p).stages[0]["ep_forward"]
        on = hpgo.simulate(m, c, p.with_(overlap_moe_comm=True)).stages[0]["ep_forward"]
        free = hpgo.simulate(m, c.with_gpu(multiprocessors=0),
                             p.with_(overlap_moe_comm=True)).stages[0]["ep_forward"]
        # contention exposes more than free SMs would, never more than no overlap
        assert free < on <= off, (disp, free, on, off)
    with pytest.raises(TypeError, match="multiprocessors"):
        c.with_gpu(multiprocessors=1.5)
    with pytest.raises(ValueError, match="multiprocessors"):
        c.with_gpu(multiprocessors=-1)
    old = c.to_dict()
    del old["gpu"]["multiprocessors"]          # cluster files written before the field
    assert hpgo.Cluster.from_dict(old).gpu.multiprocessors == 0
