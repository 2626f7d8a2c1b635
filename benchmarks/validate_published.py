"""The training-step model against published, measured pretraining runs:
every row of a measured-runs CSV file (default
../shared/reference/published_runs.csv: the Megatron-LM README's H100
table, torchtitan's H100 benchmarks, MegaScale's Megatron-LM baseline,
BLOOM-176B; hpgo.validation.load_runs), the further runs of
benchmarks/further_published_runs.csv (torchtitan's rows the reference
leaves out, Trainy's H200 run, torchao's float8 benchmark, NVIDIA's DGX
Cloud recipes, Megatron-LM's 2021 and v1.0 runs, OLMo-core's throughput
table and llm-foundry's MPT runs) with a
per-source summary and autoplan's best plan beside each published bf16
recipe, then Megatron-Bridge's H100
performance summaries and NVIDIA's MoE tables (hpgo.validation): prints,
case by case, the published and simulated tokens/s per GPU, the error, the
recomputation needed to fit, the fullest GPU's memory (and the measured
peak where published); with --kernels, the same again on a GPU calibrated
to kernels measured on an H100 (hpgo.calibrate;
profiles/h100-sxm5-kernels.json).  With --write-checked, it writes
hpgo's error on every one of these runs (and Korthikanti et al.'s) by
stack, GPU generation and precision into the file each simulation's
assumptions quote (hpgo/checked_runs.json; hpgo.validation.write_checked).

    python benchmarks/validate_published.py [--runs FILE.csv] [--further FILE.csv] [--kernels profiles/h100-sxm5-kernels.json]
    python benchmarks/validate_published.py --write-checked hpgo/checked_runs.json
"""
import argparse
import pathlib
import statistics

from hpgo import calibrate, validation

ROOT = pathlib.Path(__file__).resolve().parents[1]
RUNS = ROOT.parent / "shared" / "reference" / "published_runs.csv"
# further published runs, from the same benchmarks and another source (its header names them)
FURTHER = ROOT / "benchmarks" / "further_published_runs.csv"
KORTHIKANTI = ROOT.parent / "shared" / "reference" / "korthikanti2022.csv"


def runs_table(checks, title):
    """One line per measured run; the summary the targets are stated in."""
    print(title)
    print(f"{'run':18s} {'GPUs':>5s} {'prec':4s} {'TP PP DP CP VP MBS GBS ZeRO':28s} {'rc':12s} "
          f"{'published':>10s} {'simulated':>10s} {'error':>7s} {'GiB':>6s} {'measured':>8s}")
    for c in checks:
        r = c.run
        cfg = f"{r.tp} {r.pp} {r.dp} {r.cp} {r.vp} {r.mbs} {r.gbs} {r.zero}"
        meas = (f"{r.measured_mem_gib:5.1f} {c.memory_error * 100:+4.0f}%"
                if c.memory_error is not None else "")
        print(f"{r.source_id:18s} {r.gpus:5d} {r.precision:4s} {cfg:28s} {c.recompute:12s} "
              f"{c.published:10,.1f} {c.simulated:10,.1f} {c.error * 100:+6.1f}% "
              f"{c.memory_gib:5.1f}{' ' if c.fits else '*'} {meas}")
    errs = [abs(c.error) for c in checks]
    mems = [abs(c.memory_error) for c in checks if c.memory_error is not None]
    print(f"\n{len(checks)} runs: median |error| {statistics.median(errs) * 100:.1f} %, "
          f"{sum(e <= 0.10 for e in errs)} within 10 %, {sum(e <= 0.25 for e in errs)} within 25 %, "
          f"max {max(errs) * 100:.1f} %; {sum(c.fits for c in checks)} fit as published (* does not)"
          + (f"; measured peaks: median |error| {statistics.median(mems) * 100:.1f} %, "
             f"{sum(e <= 0.15 for e in mems)} of {len(mems)} within 15 %" if mems else ""))
    by_source = {}
    for c in checks:
        by_source.setdefault(c.run.source_id.split("-")[0], []).append(c)
    if len(by_source) > 1:
        print("by source: " + "; ".join(
            f"{k} {len(v)} run{'s' if len(v) > 1 else ''}, median "
            f"{statistics.median(abs(c.error) for c in v) * 100:.1f} %, "
            f"{sum(abs(c.error) <= 0.10 for c in v)} within 10 %, {sum(c.fits for c in v)} fit"
            for k, v in by_source.items()))
    print()


def _release(r):
    """The table's release, or what sets a row apart in the other sources."""
    if r.source.startswith(validation._MB):
        return r.release
    if r.source == validation._T:
        return "tracker"
    return ("ov " if r.overlap_moe_comm else "") + ("deepep" if r.dispatcher == "deepep" else "a2a")


def table(rows, title):
    print(title)
    print(f"{'release':9s} {'model':16s} {'GPUs':>5s} {'prec':4s} {'TP PP CP VP EP MBS GBS':24s} "
          f"{'published':>9s} {'simulated':>9s} {'error':>8s} {'GiB':>6s} | "
          f"{'least recompute that fits':26s}")
    for c in rows:
        r = c.run
        cfg = f"{r.tp} {r.pp} {r.cp} {r.vp} {r.ep} {r.micro_batch} {r.global_batch}"
        fit = "" if c.fits else (f"{c.recompute}: {c.tokens_fitting:,.0f} "
                                 f"({c.error_fitting * 100:+.1f} %) {c.memory_fitting_gib:.1f} GiB")
        print(f"{_release(r):9s} {r.model:16s} {r.gpus:5d} {r.precision:4s} {cfg:24s} "
              f"{r.tokens_per_gpu:9,.0f} {c.tokens_per_gpu:9,.0f} {c.error * 100:+7.1f}% "
              f"{c.memory_gib:5.1f}{' ' if c.fits else '*'} | {fit}")
    errs = [abs(c.error) for c in rows]
    print(f"\nas published: {sum(e <= 0.15 for e in errs)} of {len(rows)} "
          f"within 15 %, {sum(e <= 0.20 for e in errs)} within 20 %, median |error| "
          f"{statistics.median(errs) * 100:.1f} %; {sum(c.fits for c in rows)} fit as published "
          f"(* does not), {sum(c.fits_somehow for c in rows)} with recomputation\n")


def runs_markdown(checks):
    """The measured-runs table as Markdown (docs/training-model.md)."""
    print("| run | GPUs | plan (tp pp dp cp vp mbs gbs zero, recompute) | published tokens/s/GPU "
          "| hpgo | error | hpgo GiB (fits) | measured GiB |")
    print("|---|---|---|---|---|---|---|---|")
    for c in checks:
        r = c.run
        plan = (f"{r.tp} {r.pp} {r.dp} {r.cp} {r.vp} {r.mbs} {r.gbs} {r.zero}, {c.recompute}")
        meas = (f"{r.measured_mem_gib:.1f} ({c.memory_error * 100:+.0f} %)"
                if c.memory_error is not None else "")
        print(f"| {r.source_id} | {r.gpus:,} | {plan} | {c.published:,.1f} | {c.simulated:,.1f} "
              f"| {c.error * 100:+.1f} % | {c.memory_gib:.1f} ({'yes' if c.fits else 'no'}) "
              f"| {meas} |")


def autoplan_vs_published(runs):
    """autoplan's best plan on the GPUs and batch of each published bf16
    run whose notes publish its whole plan (the DGX Cloud recipes), with
    the run's kernel set and the userbuffer TP overlap it ran (autoplan's
    plans keep Megatron's optimizer), beside the published throughput and
    hpgo's simulation of the published plan; MFU in hpgo's count (causal
    attention halved) for all three."""
    import hpgo
    print("autoplan's best plan against the published bf16 runs (same GPUs, batch, kernels "
          "and TP overlap; MFU in hpgo's count):")
    print(f"{'run':18s} {'published':>10s} {'MFU':>6s} {'as published':>12s} {'autoplan':>9s} "
          f"{'MFU':>6s}  plan")
    for run in runs:
        if not run.source_id.startswith(("NV-", "NV2-")) or run.precision != "bf16":
            continue
        m, c, p = run.transformer(), run.cluster(), run.plan()
        sim = hpgo.simulate(m, c, p, precision=run.precision, timeline=False)
        best = hpgo.autoplan(m, c, run.gbs, gpus=run.gpus, precision=run.precision, top=1,
                             tp_overlap=run.tp_overlap if run.tp_overlap != "none" else "te",
                             kernels=run.kernels)[0]
        per_token = sim.mfu_bf16 / (sim.tokens_per_second / run.gpus)  # MFU per token/s/GPU
        pub = run.published_tokens_per_gpu()
        b = best.tokens_per_second / run.gpus
        print(f"{run.source_id:18s} {pub:10,.1f} {pub * per_token * 100:5.1f}% "
              f"{sim.tokens_per_second / run.gpus:12,.1f} {b:9,.1f} {best.mfu * 100:5.1f}%  "
              f"{best.plan.describe()}")
    print()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernels", help="a kernel profile (hpgo profile kernels) to calibrate the GPU")
    ap.add_argument("--runs", default=str(RUNS), help="a measured-runs CSV file (default: %(default)s)")
    ap.add_argument("--markdown", action="store_true",
                    help="print only the measured-runs table, as Markdown")
    ap.add_argument("--further", default=str(FURTHER),
                    help="a second measured-runs CSV file (default: %(default)s; '' for none)")
    ap.add_argument("--write-checked", metavar="FILE",
                    help="write hpgo's error on every checked run, by stack, to FILE "
                         "(hpgo/checked_runs.json is the file the assumptions quote)")
    a = ap.parse_args()
    if a.further and not pathlib.Path(a.further).is_file():
        ap.error(f"--further: no file {a.further}")
    if a.write_checked:
        for what, path in (("--runs", a.runs), ("Korthikanti et al.'s runs", KORTHIKANTI)):
            if not pathlib.Path(path).is_file():
                ap.error(f"--write-checked needs every checked run: no file {path} ({what})")
        if not a.further:
            ap.error("--write-checked needs the further runs (--further)")
        for band in validation.write_checked(a.write_checked, a.runs, a.further, KORTHIKANTI):
            print(band)
        print(f"wrote {a.write_checked}")
        return
    if a.markdown:
        runs_markdown(validation.check_runs(validation.load_runs(a.runs)))
        return
    if pathlib.Path(a.runs).exists():
        runs = validation.load_runs(a.runs)
        runs_table(validation.check_runs(runs), f"Measured runs of {a.runs}; the GPUs' presets:")
    else:
        print(f"({a.runs} absent: the measured-runs table is skipped)\n")
    if a.further:
        further = validation.load_runs(a.further)
        runs_table(validation.check_runs(further),
                   f"Further measured runs of {a.further}; the GPUs' presets:")
        autoplan_vs_published(further)
    gpus = [(None, "dgx-h100 preset (the H100's measured GEMM, fp8 and attention curves, "
                   "Calculon's memory curve)")]
    if a.kernels:
        prof = calibrate.load(a.kernels)
        gpus.append((calibrate.fit(prof, "dgx-h100"), f"GPU calibrated to {a.kernels} ({prof.device})"))
    for runs, name in ((validation.MEGATRON_BRIDGE_H100, "Megatron-Bridge performance summaries"),
                       (validation.MEGATRON_MOE_MODELZOO_H100, "Megatron-MoE-ModelZoo, Qwen3-235B-A22B"),
                       (validation.MEGATRON_BRIDGE_EP_OVERLAP_H100,
                        "Megatron-Bridge EP overlap A/B, Qwen3-30B-A3B EP16 (overlapped rows calibrate)"),
                       (validation.MCORE_MOE_TRACKER_H100,
                        "Megatron-Core MoE release tracker, best H100 configurations")):
        for gpu, what in gpus:
            table(validation.check(runs, gpu=gpu), f"{name}; {what}:")
    table(validation.check(validation.MEGATRON_BRIDGE_B200),
          "Megatron-Bridge performance summaries, DGX B200 (dense FP8-CS, GPT-OSS-120B BF16); "
          "dgx-b200 preset (the "
          "datasheet's peaks, the bf16 MAMF share for every GEMM, the Hopper attention "
          "fractions):")


if __name__ == "__main__":
    main()
