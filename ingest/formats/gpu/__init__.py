"""GPU traces: the collector CSV (gpu_collector, written by collector), nvidia-smi, DCGM, and what they
share (traces: the staging tables and the file's energy)."""
