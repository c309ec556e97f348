"""synattn_jobs.ddp_rank: the ``TrainResult`` rank 0 writes for the worker, read back whole."""

from __future__ import annotations

import json
from pathlib import Path

from synattn_jobs.ddp_rank import result_from_json, result_json
from synattn_trainer.train import Stop, TrainResult


def test_a_result_crosses_the_rank_boundary_with_both_best_validation_losses() -> None:
    """The best epoch-end validation loss and best.pt's (the best checkpoint's, and its
    update) both reach the worker; a run without best.pt carries None for the latter."""
    result = TrainResult(
        update=12, epoch=2, best_valid_loss=3.07, checkpoint=Path("/r/ckpt-00000012.pt"),
        averaged=Path("/r/averaged.pt"), stopped=Stop.MAX_UPDATES, selection="average",
        finals={"average": Path("/r/averaged.pt"), "best_valid": Path("/r/best.pt")},
        final_updates={"average": [9, 12], "best_valid": []},
        checkpoint_updates={"best_valid": 9}, best_checkpoint_valid_loss=3.11,
        best_checkpoint_update=9,
    )  # fmt: skip
    data = json.loads(json.dumps(result_json(result, 1234)))
    assert data["best_checkpoint_valid_loss"] == 3.11 and data["best_checkpoint_update"] == 9
    assert result_from_json(data) == (result, 1234)
    plain = TrainResult(12, 2, 3.07, None, None, Stop.MAX_UPDATES)
    assert result_from_json(json.loads(json.dumps(result_json(plain, 5)))) == (plain, 5)
