"""Node health checks: NVIDIA (pynvml), AMD (amd-smi, rocm-smi, rocminfo), network, kernel log."""
