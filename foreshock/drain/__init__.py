"""Drain recommendations: policy, exports (risk list, diff, Slurm, Kubernetes) and replay."""
