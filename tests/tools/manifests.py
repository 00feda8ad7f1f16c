"""Workload manifests the approval tests patch: a training Job in namespace `ml`, its trainer
container and, for a shm-size-limit proposal, the memory-backed /dev/shm it mounts. The text
is what a remedy reads and rewrites (kubectl patch --local), so it is kept as written YAML."""

from __future__ import annotations

_SHM_MOUNT = """\
          volumeMounts:
            - name: dshm
              mountPath: /dev/shm
"""
_SHM_VOLUME = """\
      volumes:
        - name: dshm
          emptyDir:
            medium: Memory
"""


def job(
    name: str = "train-llm",
    *,
    image: str = "registry.example.com/train:1.4",
    backoff_limit: int | None = None,
    resources: str = "",
    shm: bool = True,
    sidecars: str = "",
) -> str:
    """A Job's manifest. `resources`: the trainer's `resources:` block as written under it;
    `shm`: the trainer mounts a memory-backed /dev/shm; `sidecars`: containers after it."""
    backoff = "" if backoff_limit is None else f"  backoffLimit: {backoff_limit}\n"
    trainer = f"        - name: trainer\n          image: {image}\n"
    if resources:
        trainer += "          resources:\n" + "".join(
            f"            {line}\n" for line in resources.splitlines()
        )
    return (
        f"apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: {name}\n  namespace: ml\n"
        f"spec:\n{backoff}  template:\n    spec:\n      restartPolicy: Never\n"
        "      containers:\n"
        + trainer
        + (_SHM_MOUNT if shm else "")
        + sidecars
        + (_SHM_VOLUME if shm else "")
    )


#: the trainer of an 8-GPU job whose /dev/shm a shm-size-limit proposal resizes
GPU_JOB = job(
    backoff_limit=0,
    resources='limits:\n  memory: 640Gi\n  nvidia.com/gpu: "8"',
)
