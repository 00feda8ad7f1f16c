"""Job-scoped diagnosis: resolving a job to its nodes, running, merging."""
