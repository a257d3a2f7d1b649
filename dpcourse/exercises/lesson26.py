"""Lesson 26's exercises: a whole HSDP training run on 4 ranks, which ranks form each group of a 2-D mesh, and the
bytes a rank sends in each dimension.

The training run is judged on real ranks (``ranks.train_on_ranks``) by the weights, against one-device Adam, and
by the mechanism, which a 1-D FSDP2 or a DDP run that reaches the same weights lacks: every parameter a DTensor on
a (2, 2) mesh with placements ``(Replicate(), Shard(dim=0))``, every Linear its own unit, an all-reduce on the
replicate group and all-gathers and reduce-scatters on the shard group. The other two take numbers and are judged
against ``sharded.hsdp_traffic``'s rules, which ``tests/test_hsdp.py`` checks against what the ranks did.
"""

import itertools
import math

from torch import nn
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor

from dpcourse import examples, ranks
from dpcourse.ranks.by_source import SourceFunction
from dpcourse.sharded import hsdp
from dpcourse.sharded.hsdp_traffic import grouped, mesh_groups, traffic_per_rank
from dpcourse.ui.words import plural

from .check import Case, Exercise

HSDP_PLACEMENTS = "(Replicate(), Shard(dim=0))"


def watched(model: nn.Module, batches: list, lr: float, learner: SourceFunction) -> dict:
    """Run the learner's program (sent as source) and look at what it made: the FSDP units, each parameter's
    placements and mesh shape, the mesh's two groups for this rank, and the collectives that ran on each."""
    with grouped() as calls:
        returned = learner.rebuild()(model, batches, lr)
    result = dict(returned) if isinstance(returned, dict) else {"parameters": returned}
    parameters = list(model.parameters())
    mesh = parameters[0].device_mesh if isinstance(parameters[0], DTensor) else None
    groups = {}
    if mesh is not None and mesh.ndim == 2:
        groups = {name: tuple(mesh.mesh.select(dim, mesh.get_coordinate()[dim]).flatten().tolist())
                  for dim, name in ((1, "replicate"), (0, "shard"))}
    return {**result, "units": [name for name, module in model.named_modules() if isinstance(module, FSDPModule)],
            "placements": [str(p.placements) if isinstance(p, DTensor) else type(p).__name__ for p in parameters],
            "mesh_shapes": [tuple(p.device_mesh.shape) if isinstance(p, DTensor) else None for p in parameters],
            "groups": groups, "calls": sorted({(call.kind, call.ranks) for call in calls})}


def _on_ranks(function, case: Case) -> list[dict]:
    (world_size,) = case.args
    return ranks.train_on_ranks(watched, world_size, steps=hsdp.STEPS, widths=hsdp.WIDTHS,
                                extra={"learner": SourceFunction.of(function)})


def _mechanism(rank: int, result: dict) -> str | None:
    placements, shapes = result["placements"], result["mesh_shapes"]
    if "(Shard(dim=0),)" in placements:
        return (f"rank {rank}'s parameters are placed {placements[0]}: a 1-D mesh, so FSDP2 shards every parameter "
                "over all 4 ranks and no rank holds a replica. Build init_device_mesh(..., (2, 2), "
                "mesh_dim_names=('replicate', 'shard')) and pass it to every fully_shard")
    if set(placements) != {HSDP_PLACEMENTS}:
        return (f"rank {rank}'s parameters are {sorted(set(placements))}, not DTensors placed {HSDP_PLACEMENTS}: "
                "DDP (or no wrapper) keeps every parameter whole on every rank. fully_shard each Linear and the "
                "model on the 2-D mesh")
    if set(shapes) != {(2, 2)}:
        return (f"rank {rank}'s mesh has the shape {shapes[0]}, not (2, 2): with a dimension of 1 rank, HSDP is "
                "DDP or FSDP2 again. Use 2 replicas of 2 shards")
    layers = [name for name, m in examples.mlp(hsdp.WIDTHS).named_modules() if isinstance(m, nn.Linear)]
    if result["units"] != ["", *layers]:
        return (f"rank {rank}'s FSDP units are {result['units']}; expected the model ('') and each Linear "
                f"({', '.join(layers)}): fully_shard each nn.Linear on the mesh, then the model")
    expected = {("all-reduce", result["groups"]["replicate"]), ("all-gather", result["groups"]["shard"]),
                ("reduce-scatter", result["groups"]["shard"])}
    if not expected <= set(result["calls"]):
        return (f"rank {rank} ran {result['calls']} (collective, ranks of its group); HSDP all-gathers and "
                f"reduce-scatters on its shard group {result['groups']['shard']} and all-reduces on its replicate "
                f"group {result['groups']['replicate']}")
    return None


def _judge_training(case: Case, answer: list[dict]) -> str | None:
    difference = hsdp.difference(answer)
    if difference:
        return (difference + " FSDP2 averages the gradients over all the ranks itself (reduce-scatter in the "
                "shard group, then all-reduce in the replicate group); build the optimizer after fully_shard")
    return next(filter(None, (_mechanism(rank, result) for rank, result in enumerate(answer))), None)


TRAIN_WITH_HSDP = Exercise(
    name="train_with_hsdp",
    task="Write train_with_hsdp(model, batches, lr), run on each of 4 ranks: build "
         "init_device_mesh(next(model.parameters()).device.type, (2, 2), mesh_dim_names=('replicate', 'shard')), "
         "fully_shard each nn.Linear of the model on it, then the model; train with torch.optim.Adam(lr=lr), one "
         "step per (x, y) in batches, loss F.mse_loss(model(x), y); return the full parameters (p.full_tensor()), "
         "in model.parameters() order.",
    cases=lambda: [
        Case("4 ranks, a (2, 2) mesh, 3 steps", (hsdp.WORLD_SIZE,),
             "the mesh goes to every fully_shard call, the Linears first; a 1-D mesh gives the same weights but "
             "shards over all 4 ranks"),
    ],
    judge=_judge_training,
    call=_on_ranks,
    slow=f"starting 4 ranks and training (several seconds); ranks that wait for each other are stopped after "
         f"{ranks.TIMEOUT:g} s",
)


def _judge_groups(case: Case, answer) -> str | None:
    world_size, shard = case.args
    expected = mesh_groups(world_size, shard)
    if not isinstance(answer, dict) or set(answer) != {"shard", "replicate"}:
        return f"expected a dict with the keys 'shard' and 'replicate'; got {answer!r}"
    got = {name: [list(group) for group in groups] for name, groups in answer.items()}
    where = f"{plural(world_size, 'rank')}, shard groups of {shard}"
    for name in ("shard", "replicate"):
        if got[name] != expected[name]:
            swapped = got == {"shard": expected["replicate"], "replicate": expected["shard"]}
            return (f"{where}: the {name} groups are {expected[name]}, not {got[name]}" + (
                "; your shard and replicate groups are swapped. The mesh is arange(world_size).view(R, S): a "
                "shard group is a row, consecutive ranks" if swapped else ""))
    return None


def _group_cases() -> list[Case]:
    return [Case(f"{plural(world, 'rank')}, shard groups of {shard}", (world, shard))
            for world in range(1, 17) for shard in range(1, world + 1) if world % shard == 0]


HSDP_GROUPS = Exercise(
    name="hsdp_groups",
    task="Write hsdp_groups(world_size, shard_size): the groups of init_device_mesh(..., (world_size // shard_size, "
         "shard_size)), as fully_shard uses it. Return {'shard': [...], 'replicate': [...]}, each a list of groups "
         "(lists of ranks, in rank order): the shard groups first-rank order, the replicate groups likewise.",
    cases=lambda: [
        Case("the lesson's (2, 2) mesh", (4, 2), "rank 0 shares its shards with rank 1, and its rows with rank 2"),
        Case("2 nodes of 4 ranks", (8, 4), "a shard group is one node: 4 consecutive ranks"),
        Case("4 replicas of 2 shards", (8, 2), "a replicate group holds every rank with the same shard"),
    ],
    judge=_judge_groups,
    generated=_group_cases,
)


def _judge_traffic(case: Case, answer) -> str | None:
    parameter_bytes, replicate, shard = case.args
    expected = traffic_per_rank(parameter_bytes, replicate, shard)
    if not isinstance(answer, dict) or set(answer) != {"shard", "replicate"}:
        return f"expected a dict with the keys 'shard' and 'replicate'; got {answer!r}"
    for name in ("shard", "replicate"):
        got = answer[name]
        if not isinstance(got, int | float) or not math.isclose(got, expected[name], rel_tol=1e-9, abs_tol=1e-9):
            swapped = traffic_per_rank(parameter_bytes, shard, replicate)[name]
            hint = (" (that is the answer for the mesh the other way round: R replicas, S shards)"
                    if isinstance(got, int | float) and math.isclose(got, swapped, rel_tol=1e-9) else "")
            return (f"P = {parameter_bytes} bytes on a ({replicate}, {shard}) mesh: a rank sends "
                    f"{expected[name]:,.1f} bytes in the {name} dimension per step, not {got!r}{hint}")
    return None


def _traffic_cases() -> list[Case]:
    sizes = (1936, 4004, 1000, 12)
    return [Case(f"P = {size} bytes on a ({replicate}, {shard}) mesh", (size, replicate, shard))
            for size, replicate, shard in itertools.product(sizes, (1, 2, 3, 4, 8), (1, 2, 3, 4, 8))]


TRAFFIC_PER_RANK = Exercise(
    name="traffic_per_rank",
    task="Write traffic_per_rank(parameter_bytes, replicate, shard): the bytes one rank sends in one training step "
         "of FSDP2 on a (replicate, shard) mesh, every Linear its own unit, reshard_after_forward=True, by the ring "
         "rule ((n - 1) / n of the full size for an all-gather or a reduce-scatter on n ranks, twice that for an "
         "all-reduce). Return {'shard': bytes, 'replicate': bytes}.",
    cases=lambda: [
        Case("the lesson's model on (2, 2)", (1936, 2, 2),
             "the shard group gathers every unit twice and reduce-scatters it once; the replicate group all-reduces "
             "each rank's gradient shard, P / S"),
        Case("a (1, 4) mesh: FSDP2", (1936, 1, 4), "a replicate group of one rank sends nothing"),
        Case("a (4, 1) mesh: DDP", (1936, 4, 1), "a shard group of one rank sends nothing"),
        Case("2 nodes of 4 ranks", (1936, 2, 4), "mind which dimension is which: (replicate, shard)"),
    ],
    judge=_judge_traffic,
    generated=_traffic_cases,
)

EXERCISES = (TRAIN_WITH_HSDP, HSDP_GROUPS, TRAFFIC_PER_RANK)
