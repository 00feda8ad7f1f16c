"""After an approved fix: prove the node and the job have recovered (docs/recovery.md).

* `thresholds`, `criteria`, `fabric`: the collective test's thresholds and pass criteria (pure;
  the nccl-recovery-check runbook reads them through the `nccl_recovery` parser);
* `stages`: the staged replay's stages, its stop rule and its report (pure);
* `watcher`: the program the replay runs on the node, one stage at a time (sent, not imported);
* `replay`: the driver that runs it over a transport;
* `verify`: both layers against an approved proposal, recorded against it;
* `render`, `offer`: how it reads on a terminal, and the offer after an approval.
"""
