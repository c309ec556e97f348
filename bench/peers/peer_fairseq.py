"""fairseq's side of ``bench/peers/peer.py``; runs in fairseq's own virtualenv (never imports
synattn).

Builds fairseq's ``transformer`` through its own option parser, task, criterion, optimiser and
``fairseq.trainer.Trainer`` (what ``fairseq-train`` runs per update), and its
``SequenceGenerator`` (what ``fairseq-generate`` runs). Batches come from
``bench/peers/peer.py`` as lists of row indices, so both toolkits see the same sentences in the
same batches; each batch is made by fairseq's own collater inside the timed loop, as synattn's
``make_batch`` is.

    python peer_fairseq.py speed  --job job.json   # tokens/s over the job's batches
    python peer_fairseq.py train  --job job.json   # train the job's updates, save the weights
    python peer_fairseq.py decode --job job.json   # beam-search the validation set
"""

from __future__ import annotations

import argparse
import json
import logging
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch


def build(job: dict[str, Any]) -> tuple[Any, Any, Any]:
    """fairseq's task, model and trainer for the job's shape and optimiser settings."""
    from fairseq import options, tasks, utils
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.trainer import Trainer

    m, o = job["model"], job["optim"]
    argv = [
        job["data_bin"], "--task", "translation", "-s", "en", "-t", "de",
        "--arch", "transformer", "--share-all-embeddings",
        "--encoder-layers", str(m["enc_layers"]), "--decoder-layers", str(m["dec_layers"]),
        "--encoder-embed-dim", str(m["d_model"]), "--decoder-embed-dim", str(m["d_model"]),
        "--encoder-ffn-embed-dim", str(m["d_ff"]), "--decoder-ffn-embed-dim", str(m["d_ff"]),
        "--encoder-attention-heads", str(m["heads"]), "--decoder-attention-heads", str(m["heads"]),
        "--dropout", str(m["dropout"]), "--attention-dropout", str(m["attn_dropout"]),
        "--activation-dropout", str(m["relu_dropout"]),
        "--optimizer", "adam", "--adam-betas", f"({o['betas'][0]}, {o['betas'][1]})",
        "--adam-eps", str(o["eps"]), "--lr", str(o["lr"]), "--lr-scheduler", "inverse_sqrt",
        "--warmup-updates", str(o["warmup"]), "--warmup-init-lr", "0",
        "--criterion", "label_smoothed_cross_entropy",
        "--label-smoothing", str(o["label_smoothing"]),
        "--max-tokens", str(job["max_tokens"]), "--seed", str(job["seed"]),
        "--no-progress-bar", "--log-format", "none", "--save-dir", job["work"],
        "--num-workers", "0",
    ]  # fmt: skip
    if job["device"] == "cpu":
        argv.append("--cpu")
    elif job.get("bf16"):
        argv.append("--bf16")
    args = options.parse_args_and_arch(options.get_training_parser(), input_args=argv)
    cfg = convert_namespace_to_omegaconf(args)
    np.random.seed(cfg.common.seed)
    utils.set_torch_seed(cfg.common.seed)
    task = tasks.setup_task(cfg.task)
    task.load_dataset("train", combine=False, epoch=1)
    task.load_dataset("valid", combine=False, epoch=1)
    model = task.build_model(cfg.model)
    criterion = task.build_criterion(cfg.criterion)
    trainer = Trainer(cfg, task, model, criterion)
    return cfg, task, trainer


def run_updates(task: Any, trainer: Any, batches: list[list[int]]) -> int:
    """Train one update per batch; target tokens seen."""
    ds = task.dataset("train")
    tokens = 0
    for index in batches:
        sample = ds.collater([ds[i] for i in index])
        trainer.train_step([sample])
        tokens += int(sample["ntokens"])
    return tokens


def speed(job: dict[str, Any]) -> dict[str, Any]:
    _, task, trainer = build(job)
    warm, timed = job["batches"][: job["warmup"]], job["batches"][job["warmup"] :]
    run_updates(task, trainer, warm)
    sync(job)
    t = time.perf_counter()
    tokens = run_updates(task, trainer, timed)
    sync(job)
    took = time.perf_counter() - t
    return {"tokens": tokens, "seconds": took, "tokens_per_s": tokens / took}


def sync(job: dict[str, Any]) -> None:
    if job["device"] == "cuda":
        torch.cuda.synchronize()


def train(job: dict[str, Any]) -> dict[str, Any]:
    """Train the job's updates (the same batch sequence synattn trains on); save the weights."""
    _, task, trainer = build(job)
    t = time.perf_counter()
    tokens = run_updates(task, trainer, job["batches"])
    sync(job)
    took = time.perf_counter() - t
    torch.save(trainer.model.state_dict(), job["model_file"])
    return {"train_tokens": tokens, "train_seconds": took}


def decode(job: dict[str, Any]) -> dict[str, Any]:
    """Beam-search the validation set with the trained weights, as ``fairseq-generate`` does
    (``task.inference_step`` on batches sorted by length)."""
    from fairseq import utils

    cfg, task, trainer = build(job)
    model = trainer.model
    model.load_state_dict(torch.load(job["model_file"], map_location="cpu"))
    model.eval()
    g = cfg.generation
    g.beam, g.lenpen = job["beam"], job["lenpen"]
    g.max_len_a, g.max_len_b = job["max_len_a"], job["max_len_b"]
    generator = task.build_generator([model], g)
    valid = task.dataset("valid")
    batches = list(
        task.get_batch_iterator(
            dataset=valid, max_sentences=job["decode_batch"], ignore_invalid_inputs=False
        ).next_epoch_itr(shuffle=False)
    )
    if job["device"] == "cuda":
        batches = [utils.move_to_cuda(b) for b in batches]
    task.inference_step(generator, [model], batches[0])  # warm-up, as synattn's side does
    hyps: dict[int, list[int]] = {}
    sync(job)
    t = time.perf_counter()
    for sample in batches:
        out = task.inference_step(generator, [model], sample)
        for k, sid in enumerate(sample["id"].tolist()):
            hyps[sid] = out[k][0]["tokens"].tolist()
    sync(job)
    took = time.perf_counter() - t
    d = task.target_dictionary
    # dictionary entries are synattn's ids written as words; map back (drop fairseq's </s>)
    ids = [[int(d[i]) for i in hyps[s] if i != d.eos()] for s in range(len(valid))]
    return {"decode_seconds": took, "sentences": len(valid), "hypotheses": ids}


def versions() -> dict[str, str]:
    import fairseq

    return {"fairseq": fairseq.__version__, "torch": torch.__version__}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["speed", "train", "decode", "versions"])
    ap.add_argument("--job", type=Path)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore")  # hydra's and torch's deprecation notices
    if args.mode == "versions":
        print(json.dumps(versions()))
        return
    job = json.loads(args.job.read_text())
    torch.set_num_threads(job["threads"])
    result = {"speed": speed, "train": train, "decode": decode}[args.mode](job)
    args.out.write_text(json.dumps({**result, **versions()}))


if __name__ == "__main__":
    main()
