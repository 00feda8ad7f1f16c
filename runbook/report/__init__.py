"""The verdict and its evidence as they leave the tool: json (the contract), markdown (the
incident write-up shape), incident (`runbook report`, sanitized copies), sanitize (stable
placeholders for identifiers) and secrets (credentials redacted at every write)."""
