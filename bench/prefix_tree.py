"""Naive vs prefix-tree forward+backward on agent-shaped batches, side by side in one run.

A batch is a group of G rollouts x T turns: a shared system prompt, then per turn an
observation and a completion appended to the rollout's context (each call's prompt extends the
previous call's prompt+completion). Naive = every call as its own sequence; tree = the batch
packed into prefix-tree rows of at most --budget unique tokens. Naive = every call as its own
sequence, in right-padded micro-batches of at most --budget padded tokens. Both compute the
CISPO loss over every call's completion tokens and back-propagate one micro-batch / row at a
time, so both are bounded by the same token budget.

    python bench/prefix_tree.py [--turns 1 5 20] [--device cuda --flex]
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import statistics
import time
from functools import partial
from pathlib import Path

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

from infra.machine import machine_line
from infra.tiny_model import build_model
from trainer.losses import LossInputs, cispo_loss
from trainer.prefix_tree import pack_rows
from trainer.sequences import CallSequence
from trainer.tree_forward import tree_logprobs


def agent_batch(group: int, turns: int, system: int, obs: int, completion: int, vocab: int):
    rng = np.random.default_rng(0)
    shared = rng.integers(0, vocab, system).astype(np.int32)
    calls = []
    for g in range(group):
        context = shared
        for t in range(turns):
            context = np.concatenate([context, rng.integers(0, vocab, obs).astype(np.int32)])
            out = rng.integers(0, vocab, completion).astype(np.int32)
            calls.append(
                CallSequence(
                    sample_id=f"r{g}", call_id=f"r{g}c{t}",
                    tokens=np.concatenate([context, out]), prompt_len=context.shape[0],
                    old_logprobs=np.full(completion, -6.0, dtype=np.float32),
                    advantage=float(rng.normal()), policy_version=0,
                )
            )  # fmt: skip
            context = np.concatenate([context, out])
    return calls


def part_loss(calls, logprobs, total):
    lp = torch.cat(logprobs)
    old = torch.cat([torch.from_numpy(c.old_logprobs) for c in calls]).to(lp.device)
    adv = torch.cat([torch.full((c.completion_len,), c.advantage) for c in calls]).to(lp.device)
    return cispo_loss(LossInputs(lp, old, adv, torch.ones_like(lp)), total, eps_high=0.2).loss


def naive_microbatches(calls, budget):
    """Calls sorted by length, grouped so that batch x longest <= budget padded tokens."""
    order = sorted(range(len(calls)), key=lambda i: calls[i].tokens.shape[0])
    batches, current = [], []
    for i in order:
        longest = calls[i].tokens.shape[0]
        if current and (len(current) + 1) * longest > budget:
            batches.append(current)
            current = []
        current.append(i)
    return [*batches, current] if current else batches


def padded_logprobs(model, calls):
    """Completion log-probs of calls run as one right-padded batch with a plain causal mask."""
    longest = max(c.tokens.shape[0] for c in calls)
    ids = torch.zeros((len(calls), longest), dtype=torch.long)
    mask = torch.zeros((len(calls), longest), dtype=torch.long)
    for row, c in enumerate(calls):
        ids[row, : c.tokens.shape[0]] = torch.from_numpy(c.tokens.astype(np.int64))
        mask[row, : c.tokens.shape[0]] = 1
    device = next(model.parameters()).device
    logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits.float()
    out = []
    for row, c in enumerate(calls):
        pos = torch.arange(c.prompt_len, c.tokens.shape[0], device=device)
        rows = logits[row, pos - 1]
        tgt = ids[row, pos.cpu()].to(device)
        out.append(rows.gather(1, tgt[:, None]).squeeze(1) - torch.logsumexp(rows, -1))
    return out


def run_naive(model, calls, batches):
    """Every call as its own sequence, in padded micro-batches of the tree's token budget."""
    total = sum(c.completion_len for c in calls)
    for batch in batches:
        members = [calls[i] for i in batch]
        part_loss(members, padded_logprobs(model, members), total).backward()


def run_tree(model, calls, rows, flex):
    """Each packed row its own forward+backward."""
    total = sum(c.completion_len for c in calls)
    for row in rows:
        lps = tree_logprobs(model, row, calls, use_flex=flex)
        part_loss([calls[i] for i in row.sequence_ids], lps, total).backward()


LIBC = ctypes.CDLL(ctypes.util.find_library("c"))
M_MMAP_THRESHOLD = -3


def peak_rss_reset() -> None:
    """Give freed heap back to the OS, then restart the kernel's peak-RSS counter (VmHWM)."""
    LIBC.malloc_trim(0)
    Path("/proc/self/clear_refs").write_text("5")


def peak_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def measure(fn, device, repeats):
    times = []
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        peak_rss_reset()
        base = peak_rss_mb()
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    if device == "cuda":
        peak = (torch.cuda.max_memory_allocated() - base) / 2**20
    else:
        peak = peak_rss_mb() - base
    return statistics.median(times), peak


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, nargs="+", default=[1, 5, 20])
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--system", type=int, default=256, help="shared system prompt tokens")
    parser.add_argument("--obs", type=int, default=48, help="observation tokens per turn")
    parser.add_argument("--completion", type=int, default=32, help="completion tokens per turn")
    parser.add_argument("--budget", type=int, default=2048, help="max unique tokens per packed row")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--flex", action="store_true", help="flex_attention for tree rows (GPU)")
    args = parser.parse_args()
    print(machine_line(), flush=True)

    # Large tensors go straight to mmap and back to the OS when freed, so RSS tracks live
    # memory and each measurement's peak is its own, not the high-water mark of a previous one.
    LIBC.mallopt(M_MMAP_THRESHOLD, 64 * 1024)
    torch.manual_seed(0)
    model = build_model(args.vocab, hidden=args.hidden, layers=args.layers).to(args.device)
    params = sum(p.numel() for p in model.parameters())
    console = Console(width=200)
    console.print(
        f"model: Qwen2 {args.layers} layers, hidden {args.hidden}, {params / 1e6:.1f}M params, "
        f"{args.device}, torch {torch.__version__}, threads {torch.get_num_threads()}"
    )
    table = Table(
        "T", "calls", "naive tok", "unique tok", "dedup", "rows", "naive s", "tree s",
        "speedup", "speedup/dedup", "naive MiB", "tree MiB",
    )  # fmt: skip
    for turns in args.turns:
        calls = agent_batch(args.group, turns, args.system, args.obs, args.completion, args.vocab)
        rows = pack_rows([c.tokens for c in calls], args.budget)
        naive_tokens = sum(c.tokens.shape[0] for c in calls)
        unique = sum(r.num_tokens for r in rows)
        batches = naive_microbatches(calls, args.budget)
        run_tree(model, calls, rows, args.flex)  # warm-up both paths
        run_naive(model, calls, batches)
        model.zero_grad(set_to_none=True)
        t_naive, m_naive = measure(
            partial(run_naive, model, calls, batches), args.device, args.repeats
        )
        model.zero_grad(set_to_none=True)
        t_tree, m_tree = measure(
            partial(run_tree, model, calls, rows, args.flex), args.device, args.repeats
        )
        model.zero_grad(set_to_none=True)
        dedup = naive_tokens / unique
        speedup = t_naive / t_tree
        table.add_row(
            str(turns), str(len(calls)), str(naive_tokens), str(unique), f"{dedup:.2f}",
            str(len(rows)), f"{t_naive:.3f}", f"{t_tree:.3f}", f"{speedup:.2f}x",
            f"{speedup / dedup:.2f}", f"{m_naive:.0f}", f"{m_tree:.0f}",
        )  # fmt: skip
    console.print(table)


if __name__ == "__main__":
    main()
