"""The training-step model against published H100 pretraining runs
(Megatron-Bridge's performance summaries; hpgo.validation): prints, case by
case, the published and simulated tokens/s per GPU, the error, the
recomputation needed to fit and the fullest GPU's memory; with --kernels,
the same again on a GPU calibrated to kernels measured on an H100
(hpgo.calibrate; profiles/h100-sxm5-kernels.json).

    python benchmarks/validate_published.py [--kernels profiles/h100-sxm5-kernels.json]
"""
import argparse
import statistics

from hpgo import calibrate, validation


def table(rows, title):
    print(title)
    print(f"{'release':7s} {'model':16s} {'GPUs':>5s} {'prec':4s} {'TP PP CP VP EP MBS GBS':24s} "
          f"{'published':>9s} {'simulated':>9s} {'error':>8s} {'GiB':>6s} | "
          f"{'least recompute that fits':26s}")
    for c in rows:
        r = c.run
        cfg = f"{r.tp} {r.pp} {r.cp} {r.vp} {r.ep} {r.micro_batch} {r.global_batch}"
        fit = "" if c.fits else (f"{c.recompute}: {c.tokens_fitting:,.0f} "
                                 f"({c.error_fitting * 100:+.1f} %) {c.memory_fitting_gib:.1f} GiB")
        print(f"{r.source[-5:]:7s} {r.model:16s} {r.gpus:5d} {r.precision:4s} {cfg:24s} "
              f"{r.tokens_per_gpu:9,.0f} {c.tokens_per_gpu:9,.0f} {c.error * 100:+7.1f}% "
              f"{c.memory_gib:5.1f}{' ' if c.fits else '*'} | {fit}")
    errs = [abs(c.error) for c in rows]
    print(f"\nas published: {sum(e <= 0.15 for e in errs)} of {len(rows)} "
          f"within 15 %, {sum(e <= 0.20 for e in errs)} within 20 %, median |error| "
          f"{statistics.median(errs) * 100:.1f} %; {sum(c.fits for c in rows)} fit as published "
          f"(* does not), {sum(c.fits_somehow for c in rows)} with recomputation\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernels", help="a kernel profile (hpgo profile kernels) to calibrate the GPU")
    a = ap.parse_args()
    table(validation.check(), "dgx-h100 preset (Calculon's curves, capped at the best GEMM rate):")
    if a.kernels:
        prof = calibrate.load(a.kernels)
        gpu = calibrate.fit(prof, "dgx-h100")
        table(validation.check(gpu=gpu), f"GPU calibrated to {a.kernels} ({prof.device}):")


if __name__ == "__main__":
    main()
