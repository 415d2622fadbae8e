"""barge.k8s."""
