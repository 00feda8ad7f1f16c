"""Job-scoped diagnosis: a failed distributed job resolved to its ranks, pods, nodes and GPUs,
the runbook walked on every node at once (the sweep machinery, read-only), and the nodes'
verdicts merged into one job verdict on one clock-corrected time axis."""
