"""A job's files: list them, download one (only files inside the job's own folder)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import FileResponse

from synattn_jobs.deps import ArtifactPath, JobFolder
from synattn_jobs.schemas import ArtifactInfo
from synattn_shared.webapi import StrictJSONRoute, problems

router = APIRouter(prefix="/v1/jobs", route_class=StrictJSONRoute, tags=["artifacts"])
MAX_LISTED = 10_000


@router.get(
    "/{job_id}/artifacts",
    response_model=list[ArtifactInfo],
    responses=problems(401, 403, 404, 408),
)
def artifacts(folder: JobFolder) -> Any:
    """Files of the run (TensorBoard logs aside), at most 10,000."""
    if folder is None:
        return []
    out = []
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder)
        if p.is_symlink() or not p.is_file() or rel.parts[:1] == ("tb",):
            continue
        out.append({"name": str(rel), "bytes": p.stat().st_size})
        if len(out) >= MAX_LISTED:
            break
    return out


@router.get(
    "/{job_id}/artifacts/{name:path}",
    response_class=FileResponse,
    responses={
        200: {"content": {"application/octet-stream": {}}, "description": "The file"},
        **problems(401, 403, 404, 408),
    },
)
def artifact(path: ArtifactPath) -> FileResponse:
    return FileResponse(path)
