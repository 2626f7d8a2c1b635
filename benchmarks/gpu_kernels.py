"""Measure the kernels hpgo's training-step model prices on the GPU at hand
(needs PyTorch and a CUDA GPU) and write a kernel profile for hpgo.calibrate.
The same as ``hpgo profile kernels``; the code is hpgo/profiler/kernels.py.

    python benchmarks/gpu_kernels.py -o profiles/h100-sxm5-kernels.json
"""
import sys

from hpgo.profiler.kernels import main

if __name__ == "__main__":
    sys.exit(main())
