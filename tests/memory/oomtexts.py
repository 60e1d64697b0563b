"""Out-of-memory messages as each framework prints them, for the tests of mig-run's OOM detection (tests/memory/test_wrapper.py, test_oom.py)."""

from __future__ import annotations

OOM_TEXTS = {
    "torch": (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.50 GiB. GPU 0 has a "
        "total capacity of 9.75 GiB of which 1.12 GiB is free. Including non-PyTorch memory, "
        "this process has 8.62 GiB memory in use."
    ),
    "nvml-assert": (
        'RuntimeError: NVML_SUCCESS == r INTERNAL ASSERT FAILED at "/pytorch/c10/cuda/'
        'CUDACachingAllocator.cpp":1154, please report a bug to PyTorch. '
    ),
    "cublas": (
        "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"
    ),
    "cudnn": "RuntimeError: cuDNN error: CUDNN_STATUS_ALLOC_FAILED",
    "cuda": (
        "RuntimeError: CUDA error: out of memory\nCUDA kernel errors might be asynchronously "
        "reported at some other API call, so the stacktrace below might be incorrect.\n"
        "For debugging consider passing CUDA_LAUNCH_BLOCKING=1"
    ),
    "nccl": (
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
        "NCCLUtils.hpp:275, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL "
        "version 2.20.5\nncclUnhandledCudaError: Call to CUDA function failed.\nLast error:\n"
        "Cuda failure 'out of memory'"
    ),
    "xla": (
        "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying "
        "to allocate 17179869184 bytes."
    ),
    "tensorflow": (
        "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating "
        "tensor with shape[8192,8192] and type float on /job:localhost/replica:0/task:0/"
        "device:GPU:0 by allocator GPU_0_bfc"
    ),
    "cupy": (
        "cupy.cuda.memory.OutOfMemoryError: Out of memory allocating 4,294,967,296 bytes "
        "(allocated so far: 512 bytes)."
    ),
}
