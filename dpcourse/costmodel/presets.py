"""Rough numbers for common machines (``PRESETS``, each with its sources) and the course's example model, ResNet-50.

The GPU presets come from published specifications and assumed orders of magnitude, not from a GPU measurement:
what they give is a prediction of the cost model. ResNet-50's FLOPs, parameters and modules are computed from its
layout (``resnet50_layers``), never typed; tests/test_costmodel.py checks them against a real ResNet-50.
"""

from .model import Hardware, Workload

# Where the presets' numbers come from. None of them was measured on a GPU for this course.
_GPU = ("F = 15 TFLOP/s fp32: assumed achievable, about 3/4 of the 19.5 TFLOP/s peak in NVIDIA's A100 "
        "datasheet; mu = 1.5 TB/s: the A100 40GB's HBM2 bandwidth, 1,555 GB/s (same datasheet)")
_OVERHEADS = ("o, r, h, h_dp, h_ddp and the per-transfer latency alpha: assumed orders of magnitude (tens of "
              "microseconds per module call or transfer), not measured on a GPU")
_SOURCES = {
    "laptop CPU": "every term fitted by calibrate() on one core of this course's 2-core VM, then rounded",
    "one GPU": f"{_GPU}; beta = 500 GB/s: assumed, a copy within one GPU's memory; {_OVERHEADS}",
    "8 GPUs, PCIe": (f"{_GPU}; beta = 25 GB/s: assumed achievable, about 4/5 of the 31.5 GB/s per direction of "
                     f"the A100's PCIe 4.0 x16 link (the datasheet's 'PCIe Gen4: 64GB/s' counts both directions; "
                     f"PCI-SIG PCIe 4.0: 16 GT/s per lane, 128b/130b encoding); {_OVERHEADS}"),
    "8 GPUs, NVLink": (f"{_GPU}; beta = 150 GB/s: assumed achievable by NCCL, half of the 300 GB/s per "
                       f"direction that the A100 datasheet's 600 GB/s NVLink total gives; {_OVERHEADS}"),
}


def _preset(name: str, flops: float, memory: float, units: int, link: float, latency: float, pipelined: bool
            ) -> Hardware:
    gpu = "GPU" in name
    return Hardware(name, flops, memory, units, link, latency, module_time=3e-5 if gpu else 2.5e-5,
                    replicate_time=1.5e-5, step_overhead=5e-5, dp_overhead=3e-4, ddp_overhead=1e-4,
                    pipelined=pipelined, asynchronous=gpu, sources=_SOURCES[name])


# Orders of magnitude, not benchmarks: ``Hardware.sources`` says where each preset's numbers come from.
PRESETS = {
    "laptop CPU": _preset("laptop CPU", 9e10, 2.5e10, 1, 4e9, 2e-6, pipelined=False),
    "one GPU": _preset("one GPU", 1.5e13, 1.5e12, 1, 5e11, 1e-5, pipelined=False),
    "8 GPUs, PCIe": _preset("8 GPUs, PCIe", 1.5e13, 1.5e12, 8, 2.5e10, 1.5e-5, pipelined=True),
    "8 GPUs, NVLink": _preset("8 GPUs, NVLink", 1.5e13, 1.5e12, 8, 1.5e11, 8e-6, pipelined=True),
}


def resnet50_layers(image: int = 224) -> list[tuple[int, int, int, int]]:
    """ResNet-50's convolutions and its final Linear as ``(kernel, in channels, out channels, output side)``.

    The layout of He et al. 2016 (table 1) as torchvision and transformers build it: a 7x7 stride-2 stem and a
    stride-2 max pool, then 3, 4, 6, 3 bottleneck blocks (1x1, 3x3, 1x1 convolutions, the stride on the 3x3),
    the first block of each stage with a 1x1 projection of its input; the Linear is a 1x1 "convolution" on the
    pooled 2048 features.
    """
    side = image // 4  # the stem and the max pool each halve the side
    layers, channels = [(7, 3, 64, image // 2)], 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for block in range(blocks):
            out = side // stride if block == 0 else side
            layers += [(1, channels, width, side), (3, width, width, out), (1, width, 4 * width, out)]
            layers += [(1, channels, 4 * width, out)] if block == 0 else []
            side, channels = out, 4 * width
    return [*layers, (1, 2048, 1000, 1)]


def resnet50_flops(image: int = 224) -> float:
    """ResNet-50's FLOPs per image, forward + backward: each layer's forward is 2 * k^2 * C_in * C_out * side^2,
    a step 3 times the forward less the stem's, whose input, the image, needs no gradient (``flops``)."""
    forward = [2 * k * k * c_in * c_out * side * side for k, c_in, c_out, side in resnet50_layers(image)]
    return 3 * sum(forward) - forward[0]


def resnet50_params() -> int:
    """ResNet-50's parameters: every weight, 2 per channel of every batch norm, and the Linear's bias."""
    layers = resnet50_layers()
    return sum(k * k * c_in * c_out for k, c_in, c_out, _ in layers) + 2 * sum(c for *_, c, _ in layers[:-1]) + 1000


def resnet50_modules() -> int:
    """ResNet-50's modules as torchvision builds it (``len(list(resnet50().modules()))``), counted from its layout.

    Every convolution has its BatchNorm2d; each of the 16 bottleneck blocks is a module with one ReLU of its own
    (applied three times), and the first block of each of the 4 stages a ``Sequential`` holding its projection;
    each stage is a ``Sequential``; then the model itself, the stem's ReLU and max pool, the average pool, the Linear.
    """
    convolutions = len(resnet50_layers()) - 1  # the last entry is the Linear
    blocks, stages = 3 + 4 + 6 + 3, 4
    return 2 * convolutions + 2 * blocks + stages + stages + 4 + 1


# ResNet-50 on ImageNet (224 x 224 images); C counted as the package docstring says (``flops``).
EXAMPLE = Workload(params=resnet50_params(), modules=resnet50_modules(), batch=256, flops_per_sample=resnet50_flops(),
                   sample_bytes=3 * 224 * 224 * 4)


