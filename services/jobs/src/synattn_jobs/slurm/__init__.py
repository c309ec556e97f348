"""The Slurm executor: with ``SYNATTN_EXECUTOR=slurm`` every synattn job is one Slurm job.

Submitting a job (CLI, job API, a grid) first asks Slurm whether it would take it
(``sbatch --test-only``: an unknown partition or account, or a request above a partition's
limits, is refused with Slurm's own message, and nothing is stored), then stores it and
submits it at once. Slurm queues, shares and prioritises; synattn keeps no worker slots.

Inside the allocation, ``python -m synattn_jobs.slurm.batch JOB`` claims the job in the job
store and runs it as a Celery worker would (same runners, heartbeat, cancel flag, bit-exact
resume). A job of several processes runs under ``torchrun`` on its node, or, over several
nodes, under ``srun`` with torchrun's c10d rendezvous on the allocation's first node.

The job store stays the source of truth: ``reconcile_once`` maps Slurm's states onto
synattn's (``states``), shows Slurm's job id, state and reason, and never leaves a job
"running" whose Slurm job is gone or whose process went silent.

Why ``sbatch`` and not submitit: a synattn job is already a name in the job store, so there
is nothing to pickle; the batch script is a file a user can read and submit again by hand;
``--test-only``, ``--signal`` and ``--requeue`` map one to one onto what the executor needs;
and submitit's multi-node mode starts one Python task per rank itself, where synattn's ranks
come from torchrun.
"""
