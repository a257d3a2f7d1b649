"""Memory per rank of a large model under DDP and the ZeRO stages: a prediction by the standard accounting.

Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models" (2020), section 3 and
figure 1: mixed-precision training with Adam keeps, per parameter, 2 bytes of fp16 parameters, 2 of fp16
gradients and K = 12 of optimizer state (an fp32 copy of the parameter, Adam's momentum and variance, 4 bytes
each): 16 bytes. Each ZeRO stage divides one more of them by the N ranks. Activations, temporary buffers and
the allocator's fragmentation come on top and are not counted. ``dpcourse.memory.predict`` does the same for the
course's float32 MLP and is checked against what torch's implementations hold on CPU ranks; these numbers, for
models no CPU here can hold, are predictions.
"""

from typing import Literal

ZeroKind = Literal["ddp", "zero1", "zero2", "zero3", "fsdp"]
PARAMETER_BYTES, GRADIENT_BYTES, STATE_BYTES = 2, 2, 12
ZERO_MEMORY = """\
bytes per rank, P parameters on N ranks, mixed precision with Adam (2 + 2 + 12 bytes per parameter):
  ddp      parameters 2P      gradients 2P      optimizer state 12P       = 16P
  zero1    parameters 2P      gradients 2P      optimizer state 12P / N
  zero2    parameters 2P      gradients 2P / N  optimizer state 12P / N
  zero3    parameters 2P / N  gradients 2P / N  optimizer state 12P / N   = 16P / N   (fsdp: the same)
activations and temporary buffers not included."""
PER_PARAMETER = {"parameters": PARAMETER_BYTES, "gradients": GRADIENT_BYTES, "optimizer state": STATE_BYTES}
SHARDED = {"ddp": (), "zero1": ("optimizer state",), "zero2": ("gradients", "optimizer state"),
           "zero3": tuple(PER_PARAMETER), "fsdp": tuple(PER_PARAMETER)}  # what each kind divides by N


def zero_memory(kind: ZeroKind, params: int, n: int) -> dict[str, float]:
    """Predicted bytes per rank for ``params`` parameters on ``n`` ranks: parameters, gradients, optimizer state.

    ``zero_memory("zero3", 7 * 10**9, 8)``: a 7-billion-parameter model on 8 ranks, 14 GB per rank (1e9 bytes)
    where DDP needs 112. The formulas are ``ZERO_MEMORY``.
    """
    if kind not in SHARDED:
        raise ValueError(f"kind must be one of {list(SHARDED)}, not {kind!r}.")
    for name, value in (("params", params), ("n", n)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a whole number >= 1, not {value!r}.")
    return {name: per_param * params / (n if name in SHARDED[kind] else 1) for name, per_param in PER_PARAMETER.items()}
