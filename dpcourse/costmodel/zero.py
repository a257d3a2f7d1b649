"""Memory per rank of a large model under DDP and the ZeRO stages: a prediction by the standard accounting.

Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models" (2020), section 3 and
figure 1: mixed-precision training with Adam keeps, per parameter, 2 bytes of fp16 parameters, 2 of fp16
gradients and K = 12 of optimizer state (an fp32 copy of the parameter, Adam's momentum and variance, 4 bytes
each): 16 bytes. Each ZeRO stage divides one more of them by the N ranks. Activations, temporary buffers and
the allocator's fragmentation come on top and are not counted. ``dpcourse.memory.predict`` does the same for the
course's float32 MLP and is checked against what torch's implementations hold on CPU ranks; these numbers, for
models no CPU here can hold, are predictions.
"""

from ..training_setup import MOST_DEVICES, whole

PARAMETER_BYTES, GRADIENT_BYTES, STATE_BYTES = 2, 2, 12
# The largest models trained have about 10^12 parameters (ZeRO's paper plans for a trillion); a count a thousand
# times larger is a slip of the exponent, not a model. Refusing it also keeps every answer a float: 10^400
# parameters would overflow one (above about 1.8e308) instead of giving a number of bytes.
MOST_PARAMS = 10**15
ZERO_MEMORY = """\
bytes per rank, P parameters on N ranks, mixed precision with Adam (2 + 2 + 12 bytes per parameter):
  DDP      parameters 2P      gradients 2P      optimizer state 12P       = 16P
  ZeRO-1   parameters 2P      gradients 2P      optimizer state 12P / N
  ZeRO-2   parameters 2P      gradients 2P / N  optimizer state 12P / N
  ZeRO-3   parameters 2P / N  gradients 2P / N  optimizer state 12P / N   = 16P / N   (FSDP is ZeRO-3)
activations and temporary buffers not included."""
PER_PARAMETER = {"parameters": PARAMETER_BYTES, "gradients": GRADIENT_BYTES, "optimizer state": STATE_BYTES}
# What each kind of training_setup.KINDS that starts ranks divides by N.
SHARDED = {"DDP": (), "ZeRO-1": ("optimizer state",), "ZeRO-2": ("gradients", "optimizer state"),
           "ZeRO-3": tuple(PER_PARAMETER)}


def zero_memory(kind: str, params: int, n: int) -> dict[str, float]:
    """Predicted bytes per rank for ``params`` parameters on ``n`` ranks: parameters, gradients, optimizer state.

    ``kind`` is ``"DDP"``, ``"ZeRO-1"``, ``"ZeRO-2"`` or ``"ZeRO-3"`` (FSDP is ZeRO-3).
    ``zero_memory("ZeRO-3", 7 * 10**9, 8)``: a 7-billion-parameter model on 8 ranks, 14 GB per rank (1e9 bytes)
    where DDP needs 112. The formulas are ``ZERO_MEMORY``. ``params`` is at most ``MOST_PARAMS`` (10^15), ``n``
    at most ``training_setup.MOST_DEVICES``; anything else raises ``ValueError`` naming it.
    """
    if kind not in SHARDED:
        raise ValueError(f"kind must be one of {list(SHARDED)}, not {kind!r}.")
    params = whole("params", params, "parameters of the model", MOST_PARAMS)
    n = whole("n", n, "ranks", MOST_DEVICES)
    return {name: per_param * params / (n if name in SHARDED[kind] else 1) for name, per_param in PER_PARAMETER.items()}
