"""Real faults, live, diagnosed over SSH: scenario fixtures and their tests.

Each scenario makes a node fail the way a GPU training node fails, then runs the shipped
``nccl-init-failure`` runbook against it over SSH (``python -m runbook run nccl-init-failure
--target ssh://root@HOST --known-hosts … --identity … --var app_log_dir=… --var cgroup_dir=…
--format json``), as on-call would, and asserts the verdict.

Real where the machine allows (no GPU, no InfiniBand here):

Scenario modules (what fails, for real; the verdict it must reach):

* ``test_host_memory_oom`` -- 4 gloo ranks in a 1200 MiB memory cgroup; the kernel OOM-kills
  the rank with the big cache and the survivors fail at init: host-memory-oom. Also the same
  job under a limit that fits (no memory blame), and the diagnosis through ``--nsenter=PID``
  into a container's mount namespace;
* ``test_shm_exhausted`` -- a 4 MiB tmpfs at /dev/shm; a rank's shared-memory segment gets
  ENOSPC from posix_fallocate: shm-exhausted;
* ``test_peer_rank_exited`` -- a rank raises ValueError before init; its peer times out at
  init: peer-rank-exited;
* ``test_socket_bootstrap`` -- a rank's rendezvous port is refused (wrong MASTER_PORT):
  network-socket;
* ``test_multihost_job`` -- one 4-rank gloo job over two test hosts (rendezvous across the
  bridge); host B's cgroup is too small and the kernel OOM-kills a rank there, the ranks on host
  A fail at init. Each host diagnosed alone: B host-memory-oom in B's cgroup; A not blamed for
  B's OOM (same kernel log);
* ``test_gpu_and_fabric_shims`` -- Xid 79, uncorrectable ECC with a pending row remap, a fatal
  PCIe AER, P2P NS, an RDMA label without a device, and a healthy node, by real-format shims.
* ``test_oncall_path`` -- the on-call path end to end: one RDMA incident typed through ``run``
  (on a pseudo-terminal), ``approvals list/show/preview/approve/deny``, ``resume``, ``verify``,
  ``report`` and ``runs`` on nodes as the field has them (ssh-config aliases on port 24510, a
  ProxyJump bastion, $HOME unlike the passwd home, a Slurm node without kubectl, a
  ``kubectl://`` node agent, nodes lacking node.json, nvidia-smi, dcgmi, all_reduce_perf or
  NCCL logs); every output checked for the name typed, template text and tracebacks, and every
  command the outputs print parsed by the CLI's own parser.

The pieces, reusable by other tests:

* :mod:`tests.scenarios.cgroups` -- :class:`MemoryCgroup` (v1 or v2), :func:`foreign_oom` (a
  real OOM in a neighbour's cgroup, so the kernel log holds an OOM that is not the job's);
* :mod:`tests.scenarios.job` -- :class:`Node` (a test host dressed as a node: cgroupfs, the
  job's /dev/shm tmpfs and local name resolution, in the host's private mount namespace),
  :class:`TrainingJob` (ranks of :mod:`tests.scenarios.rank` in the job's cgroup and the host's
  namespaces), :class:`MultiHostJob` (one job's ranks over several nodes), :class:`Container`
  (a mount namespace of its own, for ``--nsenter=PID``);
* :mod:`tests.scenarios.multihost` -- ``two_host_oom_job(network, workdir)``: the two-host job
  above, run once, as a context manager any test module can wrap in a fixture;
* :mod:`tests.scenarios.shims` -- GPU and fabric tool output from real-format profiles under
  ``node-data/``;
* :mod:`tests.scenarios.fleet` -- nodes dressed as in the field (``dress``), a Slurm login
  node's ``scontrol``, the ``kubectl`` double for node-agent pods, and the on-call engineer's
  ``$HOME`` (``OncallHome``);
* :mod:`tests.scenarios.oncall` -- the CLI typed through one incident (``follow``), and the
  collector and parser of the commands its outputs print;
* ``conftest.py`` -- the module-scoped fixtures (``scenario_hosts``, ``memory_cgroups``,
  ``nodes``, ``job_on_node``) and ``diagnose``: each scenario's failure is produced once per
  module and read by several tests; everything is removed at the module's end, pass or fail.

Where the runbook does not reach the right verdict yet, the test is
``xfail(strict=True, reason="needs runbook rule: …")``: it fails the moment the rule lands, so the
marker comes off with it.

Needs: root, openssh-server, network namespaces, a memory cgroup controller, and torch==2.13.0
(CPU) in the virtualenv (tests/run.sh installs it). About 3 minutes on 2 cores.
"""
