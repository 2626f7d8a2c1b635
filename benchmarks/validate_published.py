"""The training-step model against published H100 pretraining runs
(Megatron-Bridge's performance summaries; hpgo.validation): prints, case by
case, the published and simulated tokens/s per GPU, the error, the
recomputation needed to fit and the fullest GPU's memory.

    python benchmarks/validate_published.py
"""
import statistics

from hpgo import validation


def main():
    rows = validation.check()
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
    print(f"\nas published (no recomputation): {sum(e <= 0.15 for e in errs)} of {len(rows)} "
          f"within 15 %, {sum(e <= 0.20 for e in errs)} within 20 %, median |error| "
          f"{statistics.median(errs) * 100:.1f} %; {sum(c.fits for c in rows)} fit as published "
          f"(* does not), {sum(c.fits_somehow for c in rows)} with recomputation")


if __name__ == "__main__":
    main()
