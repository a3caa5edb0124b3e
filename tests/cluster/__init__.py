"""Cluster-mode test support: a real Kubernetes control plane (see controlplane.py)."""
