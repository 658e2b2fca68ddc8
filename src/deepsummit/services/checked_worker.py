"""The process worker `deepsummit up` and the compose file start: Prefect's, checking each flow run
before its process starts.

Prefect 3.8.8 checks a run's job variables against the pool's template on the server's API, but
not everywhere: a deployment updated without naming its pool keeps variables it never checked,
and the scheduler creates runs from them; and whoever may edit the pool may edit its template.
The worker renders whatever reaches it. So this one refuses, before anything of the run executes,
a run whose pool's base job template is not the one this package ships, whose merged job
variables fall outside that template's schema, or whose DEEPSUMMIT_* variables point it at
another tracking server, Prefect server or data folder, or name another config file or code
folder. The run ends Failed with the reason in one line. The worker keeps only the allow-listed
part of the environment it was started with, before Prefect's code copies it into each flow-run
process (its workspace starters read the worker's whole environment, whatever the job says).

    python -m deepsummit.services.checked_worker --pool local --name deepsummit-local
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio.abc
from prefect.client.schemas.objects import FlowRun, WorkPool
from prefect.client.schemas.responses import DeploymentResponse
from prefect.settings import PREFECT_WORKER_HEARTBEAT_SECONDS
from prefect.states import Failed
from prefect.utilities.processutils import setup_signal_handlers_worker
from prefect.utilities.schema_tools.validation import ValidationError, validate
from prefect.workers.base import BaseWorkerResult
from prefect.workers.process import ProcessWorker

from deepsummit.core.config import CONFIG_VARIABLE, Settings, env_overrides, load_settings
from deepsummit.core.sections import PROJECT_DIR_VARIABLE
from deepsummit.services.local import PROCESS_JOB_TEMPLATE

# What the flow-run process inherits of the worker's environment besides the PREFECT_*,
# DEEPSUMMIT_* and MLFLOW_* settings (the server, the pipeline's settings, the registry's
# login): what Python, PyTorch and CUDA need to start (LD_LIBRARY_PATH as the CUDA image sets
# it for the worker; a run cannot set it). Nothing else that loads code of its own
# (LD_PRELOAD, PYTHONSTARTUP, PYTHONHOME).
INHERITED = frozenset(
    {
        "PATH", "HOME", "USER", "LANG", "LC_ALL", "TZ", "TMPDIR", "HOSTNAME", "PYTHONPATH",
        "VIRTUAL_ENV", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "LD_LIBRARY_PATH", "CUDA_HOME",
        "CUDA_VERSION", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES",
        "NVIDIA_DRIVER_CAPABILITIES", "DO_NOT_TRACK", "TQDM_DISABLE",
    }
)  # fmt: skip
INHERITED_PREFIXES = ("PREFECT_", "DEEPSUMMIT_", "MLFLOW_")
# Settings fields that say where a run reads, writes or reports, by name: beside every path.
LOCATION_SUFFIXES = ("_uri", "_url", "_host", "host", "_port")


def inherited(name: str) -> bool:
    return name in INHERITED or name.startswith(INHERITED_PREFIXES)


def shipped_template() -> dict[str, Any]:
    return json.loads(PROCESS_JOB_TEMPLATE.read_text())


def merged_job_variables(
    deployment: DeploymentResponse | None, flow_run: FlowRun
) -> dict[str, Any]:
    """The run's job variables as Prefect's worker merges them (BaseJobConfiguration.
    resolve_for_flow_run): the deployment's, the run's over them, `env` merged key by key."""
    merged = json.loads(json.dumps(getattr(deployment, "job_variables", None) or {}))
    own = dict(flow_run.job_variables or {})
    if isinstance(merged.get("env"), dict) and isinstance(own.get("env"), dict):
        merged["env"].update(own.pop("env"))
    return merged | own


def _locations(settings: Settings) -> dict[str, Any]:
    """Every setting that says where: paths, URLs, hosts and ports, by `section.field`."""
    found = {}
    for section, values in settings.model_dump().items():
        for name, value in values.items() if isinstance(values, dict) else ():
            if isinstance(value, Path) or name.endswith(LOCATION_SUFFIXES):
                found[f"{section}.{name}"] = value
    return found


def misdirected(env: Mapping[str, str | None]) -> str | None:
    """Why the run's DEEPSUMMIT_* variables are refused, or None: a config file or code folder
    of its own, or a location that differs from the worker's settings."""
    given = {name: value for name, value in env.items() if value is not None}
    for chosen in (PROJECT_DIR_VARIABLE, CONFIG_VARIABLE):
        if chosen in given:
            return f"{chosen} is the worker's to set, not a run's"
    own = _locations(load_settings())
    theirs = _locations(load_settings(given.get("DEEPSUMMIT_PROFILE"), env_overrides(given)))
    moved = sorted(name for name, value in theirs.items() if own.get(name) != value)
    if moved:
        return f"its DEEPSUMMIT_* variables move {', '.join(moved)} away from the worker's"
    return None


def refusal(work_pool: WorkPool, job_variables: dict[str, Any]) -> str | None:
    """Why this worker must not start a run with `job_variables` from `work_pool`, or None."""
    template = shipped_template()
    if work_pool.base_job_template != template:
        return (
            f"work pool {work_pool.name!r} has another base job template than "
            f"{PROCESS_JOB_TEMPLATE.name}: refused (create the pool again from it)"
        )
    try:
        validate(
            job_variables, template["variables"], raise_on_error=True, allow_none_with_default=True
        )
    except ValidationError as error:
        return f"job variables outside {PROCESS_JOB_TEMPLATE.name}: {str(error).splitlines()[0]}"
    try:
        return misdirected(job_variables.get("env") or {})
    except ValueError as error:  # a setting that does not parse is no setting of this worker's
        return f"its DEEPSUMMIT_* variables are not settings: {str(error).splitlines()[0]}"


class CheckedProcessWorker(ProcessWorker):
    """Prefect's process worker, refusing what `refusal` names before the run's process starts."""

    @classmethod
    def __dispatch_key__(cls) -> str:
        # Prefect registers each worker class under this key; under its `type`, "process", it
        # would replace Prefect's own for every lookup in the process. Its pools stay "process".
        return "deepsummit-process"

    async def _submit_run_and_capture_errors(
        self,
        flow_run: FlowRun,
        task_status: anyio.abc.TaskStatus[int | Exception] | None = None,
    ) -> BaseWorkerResult | Exception:
        try:
            reason = await self._refusal(flow_run)
        except Exception as error:  # what cannot be checked does not run
            reason = f"could not be checked ({type(error).__name__}: {error})".splitlines()[0]
        if reason is None:
            return await super()._submit_run_and_capture_errors(flow_run, task_status)
        self.get_flow_run_logger(flow_run).error("refused by worker %s: %s", self.name, reason)
        refused = RuntimeError(reason)
        if task_status is not None:
            task_status.started(refused)  # nothing started: the worker goes on polling
        await self.client.set_flow_run_state(
            flow_run.id, Failed(message=f"refused by worker {self.name}: {reason}"), force=True
        )
        self._release_limit_slot(flow_run.id)
        return refused

    async def _refusal(self, flow_run: FlowRun) -> str | None:
        deployment = (
            await self.client.read_deployment(flow_run.deployment_id)
            if flow_run.deployment_id
            else None
        )
        job_variables = merged_job_variables(deployment, flow_run)
        # The pool as the server has it now, and as this worker renders the run (its snapshot,
        # synchronised every heartbeat): both must be the shipped one.
        fresh = await self.client.read_work_pool(self.work_pool.name)
        return refusal(fresh, job_variables) or refusal(self.work_pool, job_variables)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="A Prefect process worker checking each run")
    parser.add_argument("--pool", required=True, help="the work pool to poll (created already)")
    parser.add_argument("--name", required=True, help="the worker's name on the Prefect server")
    args = parser.parse_args(argv)
    for name in [name for name in os.environ if not inherited(name)]:
        del os.environ[name]
    setup_signal_handlers_worker(os.getpid(), "the deepsummit process worker", print)
    worker = CheckedProcessWorker(
        work_pool_name=args.pool,
        name=args.name,
        heartbeat_interval_seconds=int(PREFECT_WORKER_HEARTBEAT_SECONDS.value()),
        create_pool_if_not_found=False,
    )
    asyncio.run(worker.start(printer=print))


if __name__ == "__main__":
    main()
