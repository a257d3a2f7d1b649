"""Lesson 26's measurements as text: where each rank sits on the mesh and what it holds, the collectives of one
step by process group, and the bytes each rank holds, for HSDP, 1-D FSDP2 and DDP (``hsdp.tour``'s results)."""

from .hsdp import KINDS, runs


def layout_table(results: list[dict]) -> str:
    """One line per rank: its place on the mesh, its two groups, and which rows of ``0.weight`` its shard holds."""
    lines = []
    for rank, result in enumerate(results):
        first, end = result["rows"]
        lines.append(f"rank {rank} at mesh {tuple(result['coordinate'])}: shard group {result['groups']['shard']}, "
                     f"replicate group {result['groups']['replicate']}; 0.weight rows {first} ... {end - 1}, "
                     f"local {tuple(result['local'])}")
    return "\n".join(lines) + f"\nplacements of every parameter: {results[0]['placements']}"


def _calls(calls: dict[str, int]) -> str:
    return ", ".join(f"{count} {kind}" for kind, count in calls.items()) or "nothing"


def dimension_lines(result: dict) -> str:
    """One line per group of one rank's run: the collectives of the first step on it and their total size."""
    return "\n".join(f"{name} group {result['groups'][name]}: {_calls(entry['calls'])}, {entry['size']:,} bytes "
                     "in all" for name, entry in result["traffic"].items())


def traffic_table(results: list[dict]) -> str:
    """Rank 0's first step under each kind, one line per group: the collectives, their total size, and the bytes
    the rank sent in them by the ring rule (``hsdp_traffic.sent_by_ring``)."""
    lines = [f"{'':<6}{'group':<27}{'collectives':<34}{'size (bytes)':>13}{'sent by rank 0':>16}"]
    for kind in reversed(KINDS):
        result = runs(results, kind)[0]
        for name, entry in result["traffic"].items():
            group = f"{name} {result['groups'][name]}"
            lines.append(f"{kind:<6}{group:<27}{_calls(entry['calls']):<34}{entry['size']:>13,}"
                         f"{entry['sent']:>16,.0f}")
    return "\n".join(lines)


def held(results: list[dict]) -> dict[str, dict[str, int]]:
    """Rank 0's bytes of parameters, gradients and Adam's state after training, by kind."""
    return {kind: runs(results, kind)[0]["bytes"] for kind in KINDS}


def memory_table(results: list[dict]) -> str:
    """Rank 0's bytes after training under each kind: parameters, gradients, Adam's state and their sum."""
    kinds = held(results)
    names = list(next(iter(kinds.values())))
    lines = [f"{'':<6}" + "".join(f"{name:>17}" for name in (*names, "total"))]
    for kind, entry in kinds.items():
        lines.append(f"{kind:<6}" + "".join(f"{value:>17,}" for value in (*entry.values(), sum(entry.values()))))
    return "\n".join(lines)


def all_reduce_share(results: list[dict]) -> str:
    """How many bytes HSDP's replicate group all-reduced in the first step, as a share of DDP's all-reduce."""
    share = results[0]["traffic"]["replicate"]["size"] / results[0]["DDP"]["traffic"]["all ranks"]["size"]
    return f"all-reduced per step: HSDP's replicate group {share:.2f} of DDP's"


def memory_ratios(results: list[dict]) -> str:
    """Rank 0's total bytes held: DDP's over HSDP's, and HSDP's over FSDP2's."""
    total = {kind: sum(entry.values()) for kind, entry in held(results).items()}
    return f"DDP / HSDP: {total['DDP'] / total['HSDP']:.2f}, HSDP / FSDP2: {total['HSDP'] / total['FSDP2']:.2f}"
