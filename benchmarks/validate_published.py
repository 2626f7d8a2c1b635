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
          f"{'published':>9s} {'simulated':>9s} {'error':>7s} {'recompute':9s} {'GiB':>5s} fits")
    for c in rows:
        r = c.run
        cfg = f"{r.tp} {r.pp} {r.cp} {r.vp} {r.ep} {r.micro_batch} {r.global_batch}"
        print(f"{r.source[-5:]:7s} {r.model:16s} {r.gpus:5d} {r.precision:4s} {cfg:24s} "
              f"{r.tokens_per_gpu:9,.0f} {c.tokens_per_gpu:9,.0f} {c.error * 100:+6.1f}% "
              f"{c.recompute:9s} {c.memory_gib:5.1f} {'yes' if c.fits else 'NO'}")
    errs = [abs(c.error) for c in rows]
    print(f"\n{sum(e <= 0.15 for e in errs)} of {len(rows)} within 15 %, "
          f"{sum(e <= 0.20 for e in errs)} within 20 %; median |error| "
          f"{statistics.median(errs) * 100:.1f} %; all fit: {all(c.fits for c in rows)}")


if __name__ == "__main__":
    main()
