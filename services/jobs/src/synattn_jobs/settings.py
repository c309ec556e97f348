"""Job queue settings: one pydantic object read from ``SYNATTN_*`` environment variables.

With nothing set, everything is embedded under ``SYNATTN_HOME`` (default ``~/.synattn``): the
job store and the broker are SQLite files, so a laptop needs no server. Compose and clusters set
``SYNATTN_BROKER_URL=redis://...`` and ``SYNATTN_DATABASE_URL=postgresql+psycopg://...``.

Every path in a request (a training config, a corpus, a shard folder, a grid's config, a
config's data paths) is resolved against, and must lie inside, the data root
``SYNATTN_DATA_ROOT``. It defaults to the working directory the service was started in (the
folder ``synattn serve-jobs`` or a worker runs from); set it whenever the service runs
elsewhere, e.g. ``SYNATTN_DATA_ROOT=/srv/data``. Runs go under ``SYNATTN_RUNS_DIR``
(default: ``<data root>/runs``).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from synattn_jobs.specs import MAX_PROCESSES, SlurmMem, SlurmName, SlurmTime
from synattn_shared.serve import ServeTimeouts


class JobSettings(BaseSettings, ServeTimeouts):
    """Where jobs are stored and queued, and how long-running tasks are supervised."""

    model_config = SettingsConfigDict(env_prefix="SYNATTN_", extra="ignore")

    home: Path = Field(default_factory=lambda: Path.home() / ".synattn")
    broker_url: str = ""  # default: kombu's SQLAlchemy transport on <home>/broker.sqlite
    database_url: str = ""  # default: SQLite at <home>/jobs.sqlite
    data_root: Path = Field(
        default_factory=Path.cwd,
        description="every path in a request or a job configuration is resolved against this "
        "folder and must lie inside it (default: the working directory the service started in)",
    )
    runs_dir: Path | None = None  # default: <data_root>/runs
    heartbeat_s: float = Field(10.0, gt=0, description="running jobs refresh their heartbeat")
    stale_after_s: float = Field(
        60.0, gt=0, description="a running job silent this long is requeued by the reaper"
    )
    cancel_poll_s: float = Field(1.0, ge=0, description="how often a trainer reads the flag")
    visibility_timeout_s: int = Field(
        7 * 24 * 3600, description="Redis redelivery of unacked tasks: longer than any run"
    )
    max_retries: int = Field(5, ge=0, description="retries of transient errors, with backoff")
    loader_workers: int = Field(
        0,
        ge=0,
        le=64,
        description="processes a trainer uses to build batches ahead of the device (GPU "
        "workers: a few; the batches, hence the results, are the same as with 0, inline)",
    )
    store_outage_s: float = Field(
        300.0,
        gt=0,
        le=86_400,
        description="how long a worker waits out an unreachable job store (a database restart) "
        "before a claim or a job's outcome gives up",
    )
    max_body_bytes: int = Field(1_000_000, ge=1024, description="job API request body limit")
    events_max_s: float = Field(
        3600.0, gt=0, le=86_400, description="a progress event stream closes after this"
    )
    # resource caps: a submitted configuration beyond any of these is refused (422)
    max_d_model: int = Field(4096, ge=8, description="model width (d_model)")
    max_d_ff: int = Field(16_384, ge=8, description="feed-forward width")
    max_layers: int = Field(24, ge=1, description="layers per stack (encoder, decoder)")
    max_heads: int = Field(64, ge=1, description="attention heads per layer")
    max_tokens_per_batch: int = Field(65_536, ge=16, description="data.max_tokens")
    max_updates: int = Field(1_000_000, ge=1, description="train.max_updates")
    max_grid_jobs: int = Field(200, ge=1, description="training jobs one experiment may plan")
    # fair share (synattn_jobs.dispatch): quotas, and how queued jobs reach the broker
    max_queued_per_user: int = Field(1000, ge=0, description="queued jobs one user may have")
    max_running_per_user: int | None = Field(
        None,
        ge=0,
        description="processes one user's running jobs may have (a job of N processes counts "
        "N; default: no limit)",
    )
    dispatch: Literal["fair", "fifo"] = Field(
        "fair",
        description="fair: queued jobs wait in the store and are released as workers free "
        "up, fewest-running user first; fifo: every job goes to the broker at submit",
    )
    dispatch_ahead: int = Field(
        0, ge=0, le=1000, description="jobs released beyond the free worker slots, per queue"
    )
    release_timeout_s: float = Field(
        600.0, gt=0, description="a released job no worker took this long is released again"
    )
    # data-parallel training jobs (synattn_jobs.ddp)
    worker_devices: int | None = Field(
        None,
        ge=1,
        le=MAX_PROCESSES,
        description="devices this worker owns, hence the most processes a job it takes may have "
        "(it runs one job at a time, on its first N devices); default: the CUDA GPUs it sees, "
        "or 1 without any (a CPU worker may say 2 to run 2-process gloo jobs)",
    )
    max_processes: int = Field(
        8,
        ge=1,
        le=MAX_PROCESSES,
        description="processes a training job may ask for at most on one node (a multi-node "
        "Slurm job may have this many on each); while no live training worker has advertised "
        "its devices, a submission up to this is accepted (and waits for one)",
    )
    ddp_timeout_s: float = Field(
        600.0,
        gt=0,
        le=86_400,
        description="a collective of a multi-process job waiting this long fails, and the job "
        "with it: a rank that hangs never holds the worker longer",
    )
    ddp_stop_grace_s: float = Field(
        120.0,
        gt=0,
        le=3600,
        description="a cancelled multi-process job stops at its next update and saves; after "
        "this long its processes are terminated instead",
    )
    # the executor (synattn_jobs.slurm): who runs a released job
    executor: Literal["celery", "slurm"] = Field(
        "celery",
        description="celery: synattn's own workers take jobs from the broker; slurm: each job "
        "is submitted at once to Slurm with sbatch, and Slurm queues, shares and runs it",
    )
    slurm_partition: SlurmName | None = Field(
        None, description="Slurm partition of training jobs (default: the cluster's default)"
    )
    slurm_parse_partition: SlurmName | None = Field(
        None, description="Slurm partition of parse jobs (default: slurm_partition)"
    )
    slurm_account: SlurmName | None = Field(None, description="Slurm account (sbatch --account)")
    slurm_qos: SlurmName | None = Field(None, description="Slurm QOS (sbatch --qos)")
    slurm_time: SlurmTime | None = Field(
        None,
        description="time limit of a Slurm job (sbatch --time: minutes, or [D-]HH:MM:SS); a job "
        "that reaches it is checkpointed and requeued, so it may be shorter than a run",
    )
    slurm_gpus_per_node: int = Field(
        0,
        ge=0,
        le=64,
        description="GPUs a node of the partition has; 0 on a CPU cluster. A job asks "
        "--gpus-per-node for its processes per node, which may not exceed this",
    )
    slurm_cpus_per_process: int = Field(
        1, ge=1, le=256, description="CPUs each process of a job asks for (--cpus-per-task)"
    )
    slurm_mem: SlurmMem | None = Field(
        None, description="memory per node (sbatch --mem, e.g. 16G; default: the partition's)"
    )
    slurm_signal_s: int = Field(
        120,
        ge=10,
        le=3600,
        description="seconds before its time limit a job is signalled (--signal=B:USR1@S) to "
        "checkpoint and requeue itself; Slurm may signal up to a minute earlier",
    )
    slurm_extra: list[str] = Field(
        default_factory=list,
        description="further sbatch options for every job, set by whoever runs the service "
        '(e.g. ["--constraint=a100"]); a user\'s job cannot add any',
    )
    slurm_python: str = Field(
        "",
        description="the Python a Slurm job runs synattn with on the nodes (default: the one "
        "that submits, which the nodes must share)",
    )
    slurm_max_resubmits: int = Field(
        5,
        ge=0,
        le=100,
        description="times a job whose Slurm job ended without finishing (node failure, lost "
        "heartbeat) is submitted again before it is marked failed",
    )
    parser_url: str = Field(
        "",
        description="a parser API (http://host:8001) that parses raw text for POST "
        "/v1/jobs/{id}/translate and the attention explorer's free text, as the run's training "
        "data was parsed (unset: they parse in this process, with the parser package)",
    )
    attention_models: int = Field(2, ge=1, le=16, description="models the explorer keeps loaded")
    attention_max_tokens: int = Field(
        128, ge=4, le=1024, description="longest source or target (subwords) the explorer shows"
    )
    api_host: str = "127.0.0.1"
    api_port: int = 8002
    token: SecretStr | None = Field(
        None,
        description="a job API token (`synattn token create NAME`): what the CLI submits is "
        "owned by its user, so it shows in that user's dashboard (unset: the local admin "
        "`local`, whose jobs only an admin token sees)",
    )

    @model_validator(mode="after")
    def _defaults(self) -> JobSettings:
        self.home = self.home.expanduser().resolve()
        self.data_root = self.data_root.expanduser().resolve()
        if not self.broker_url:
            self.broker_url = f"sqla+sqlite:///{self.home / 'broker.sqlite'}"
        if not self.database_url:
            self.database_url = f"sqlite:///{self.home / 'jobs.sqlite'}"
        if self.runs_dir is None:
            self.runs_dir = self.data_root / "runs"
        self.runs_dir = self.runs_dir.expanduser().resolve()
        return self

    @property
    def embedded(self) -> bool:
        """True when the broker is a local SQLite file (no server)."""
        return self.broker_url.startswith("sqla+sqlite")

    def prepare(self) -> None:
        """Create the folders an embedded install writes to."""
        self.home.mkdir(parents=True, exist_ok=True)


@lru_cache(maxsize=1)
def get_settings() -> JobSettings:
    """The process-wide settings (tests clear the cache after changing the environment)."""
    s = JobSettings()
    s.prepare()
    return s
